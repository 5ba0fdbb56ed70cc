"""Operations: metrics, health, logs, limits and process lifecycle."""
