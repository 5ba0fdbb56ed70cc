from examples.sample_bot.bot import main

main()
