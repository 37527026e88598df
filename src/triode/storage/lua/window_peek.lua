-- A counting window's count, without counting. Answers {1, count, ms until it closes}.
return {1, tonumber(redis.call('GET', KEYS[1]) or '0'), redis.call('PTTL', KEYS[1])}
