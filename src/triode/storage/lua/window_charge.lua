-- Adds ARGV[1] to a counting window, opening it for ARGV[2] ms if it is not open.
redis.call('INCRBY', KEYS[1], ARGV[1])
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
