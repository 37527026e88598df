-- A counting window admits while its count is below ARGV[1]; its first count opens it for
-- ARGV[2] ms. Answers {admitted, count, ms until it closes}.
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local ttl = redis.call('PTTL', KEYS[1])
if c < tonumber(ARGV[1]) then
  c = redis.call('INCR', KEYS[1])
  if ttl < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]); ttl = tonumber(ARGV[2]) end
  return {1, c, ttl}
end
return {0, c, ttl}
