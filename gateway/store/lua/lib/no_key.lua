-- lib/no_key.lua: the first lines of a script that takes '' for a key it is not given (a layout not
-- read, no grant). On a Redis Cluster every declared key must be of the call's slot, so the pipe
-- names an absent key by the others' hash tag instead ('{1a2b3c4d}', gateway/store/slots.py,
-- placeholders()): a declared key that begins with '{' reads as '' again here. No key of the
-- gateway's begins with '{' (they all begin 'pact:').

for i = 1, #KEYS do if string.byte(KEYS[i], 1) == 123 then KEYS[i] = '' end end
