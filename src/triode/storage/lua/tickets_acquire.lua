-- Concurrency tickets: a sorted set scored by lease expiry. Drops lapsed tickets (scored at
-- or before ARGV[3], now), then adds ticket ARGV[2] expiring at ARGV[4] while the set holds
-- fewer than ARGV[1]; the set itself expires after ARGV[5] ms without an acquire.
-- Answers {admitted, tickets held, 0}.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
local n = redis.call('ZCARD', KEYS[1])
if n < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], ARGV[4], ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  return {1, n + 1, 0}
end
return {0, n, 0}
