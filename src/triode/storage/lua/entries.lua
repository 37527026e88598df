-- triode's store policy (storage/budget.py's BudgetedMap) as one Redis script: atomic per call.
-- KEYS[1]: the store's prefix. ARGV: op, now (-1: the server's clock), max_entries, max_bytes,
-- the store's ttl, the expiry grace in ms, then the op's own arguments.
--
-- Layout under P = KEYS[1]:
--   P:v:<key>      LIST    the entry's values
--   P:size/ins/ttl HASH    key -> size in bytes / inserted-at time / ttl (0: none)
--   P:lru          ZSET    ordinary keys by recency (scores from P:tick)
--   P:exp          ZSET    ordinary keys with a ttl, by expiry time (ins + ttl)
--   P:pin          SET     pinned keys (outside TTL and LRU)
--   P:st           HASH    bytes, pinned_bytes, ev_ttl, ev_lru, ev_bytes, ev_oversize, ev_deleted
--   P:items:<key>  SET     item ids the entry holds;  P:item:<id>  STRING  the key holding it
-- Numbers that are times are written with %.17g, so they read back exactly as Python's floats.

local P = KEYS[1]
local op = ARGV[1]
local now = tonumber(ARGV[2])
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local max_entries = tonumber(ARGV[3])
local max_bytes = tonumber(ARGV[4])
local map_ttl = tonumber(ARGV[5])
local grace_ms = tonumber(ARGV[6])

local ST, LRU, EXP, PIN, TICK = P .. ':st', P .. ':lru', P .. ':exp', P .. ':pin', P .. ':tick'
local SIZE, INS, TTL = P .. ':size', P .. ':ins', P .. ':ttl'
local function V(k) return P .. ':v:' .. k end
local function ITEMS(k) return P .. ':items:' .. k end
local function ITEM(id) return P .. ':item:' .. id end
local function fmt(x) return string.format('%.17g', x) end
local function stat(field) return tonumber(redis.call('HGET', ST, field) or '0') end
local function add(field, n) redis.call('HINCRBY', ST, field, n) end
local function size_of(k) return tonumber(redis.call('HGET', SIZE, k)) end
local function is_pinned(k) return redis.call('SISMEMBER', PIN, k) == 1 end
local function is_ordinary(k) return redis.call('ZSCORE', LRU, k) ~= false end
local function commas(existing, n)
  if n == 0 then return 0 end
  if existing > 0 then return n end
  return n - 1
end

local function push(k, values, first, last)
  local i = first
  while i <= last do
    local j = math.min(i + 999, last)
    redis.call('RPUSH', V(k), unpack(values, i, j))
    i = j + 1
  end
end

-- The item index follows the entries: whatever removes an entry forgets its items.
local function forget(k)
  for _, id in ipairs(redis.call('SMEMBERS', ITEMS(k))) do
    if redis.call('GET', ITEM(id)) == k then redis.call('DEL', ITEM(id)) end
  end
  redis.call('DEL', ITEMS(k))
end

local function drop_meta(k)
  redis.call('HDEL', SIZE, k)
  redis.call('HDEL', INS, k)
  redis.call('HDEL', TTL, k)
  redis.call('DEL', V(k))
end

local function remove_ordinary(k)
  local s = size_of(k)
  redis.call('ZREM', LRU, k)
  redis.call('ZREM', EXP, k)
  drop_meta(k)
  add('bytes', -s)
  forget(k)
end

local function discard(k)
  if is_pinned(k) then
    local s = size_of(k)
    redis.call('SREM', PIN, k)
    drop_meta(k)
    add('pinned_bytes', -s)
    forget(k)
  elseif is_ordinary(k) then
    remove_ordinary(k)
  end
end

local function expired(k)
  local ttl = tonumber(redis.call('HGET', TTL, k))
  return ttl > 0 and now >= tonumber(redis.call('HGET', INS, k)) + ttl
end

-- 'pinned', 'ordinary', or nil; an expired ordinary entry is dropped (a TTL eviction).
local function live(k)
  if is_pinned(k) then return 'pinned' end
  if not is_ordinary(k) then return nil end
  if expired(k) then
    remove_ordinary(k)
    add('ev_ttl', 1)
    return nil
  end
  return 'ordinary'
end

local function touch(k) redis.call('ZADD', LRU, redis.call('INCR', TICK), k) end

local function drop_expired()
  local n = 0
  for _, k in ipairs(redis.call('ZRANGEBYSCORE', EXP, '-inf', fmt(now))) do
    remove_ordinary(k)
    add('ev_ttl', 1)
    n = n + 1
  end
  return n
end

local function evict_oldest(cause)
  remove_ordinary(redis.call('ZRANGE', LRU, 0, 0)[1])
  add('ev_' .. cause, 1)
end

local function evict_to_fit()
  drop_expired()
  while redis.call('ZCARD', LRU) > max_entries do evict_oldest('lru') end
  while stat('bytes') > max_bytes do evict_oldest('bytes') end
end

-- Redis frees the value itself a grace period after its TTL, even if no process sweeps.
-- Pinned entries have none.
local function backstop(k)
  local ttl = tonumber(redis.call('HGET', TTL, k))
  if is_pinned(k) then ttl = 0 end
  local keys = {V(k), ITEMS(k)}
  for _, id in ipairs(redis.call('SMEMBERS', ITEMS(k))) do table.insert(keys, ITEM(id)) end
  for _, key in ipairs(keys) do
    if ttl > 0 then
      redis.call('PEXPIRE', key, math.ceil(ttl * 1000) + grace_ms)
    else
      redis.call('PERSIST', key)
    end
  end
end

local function set_meta(k, size, ins, ttl)
  redis.call('HSET', SIZE, k, size)
  redis.call('HSET', INS, k, fmt(ins))
  redis.call('HSET', TTL, k, fmt(ttl))
end

-- An ordinary entry whose values are written: as the newest, then evict until budgets hold.
local function admit(k, size, ins, ttl)
  if max_bytes == 0 or size > max_bytes then
    if max_bytes == 0 then add('ev_bytes', 1) else add('ev_oversize', 1) end
    drop_meta(k)
    forget(k)
    return 0
  end
  set_meta(k, size, ins, ttl)
  touch(k)
  if ttl > 0 then redis.call('ZADD', EXP, fmt(ins + ttl), k) end
  add('bytes', size)
  backstop(k)
  evict_to_fit()
  if is_ordinary(k) then return 1 end
  return 0
end

local function put(k, values, first, last, size, pinned, ttl)
  discard(k)
  if pinned then
    if stat('pinned_bytes') + size > max_bytes then return 0 end
    push(k, values, first, last)
    set_meta(k, size, now, ttl)
    redis.call('SADD', PIN, k)
    add('pinned_bytes', size)
    return 1
  end
  push(k, values, first, last)
  return admit(k, size, now, ttl)
end

-- Grows (or, with a negative size and no items, shrinks) an entry in place, keeping its age.
local function extend(k, state, values, first, last, size)
  local n = last - first + 1
  local growth = size + commas(redis.call('LLEN', V(k)), n)
  if state == 'pinned' then
    if stat('pinned_bytes') + growth > max_bytes then return 0 end
    add('pinned_bytes', growth)
  elseif size_of(k) + growth > max_bytes then
    remove_ordinary(k)
    add('ev_oversize', 1)
    return 0
  else
    add('bytes', growth)
    touch(k)
  end
  push(k, values, first, last)
  redis.call('HINCRBY', SIZE, k, growth)
  evict_to_fit()
  return 1
end

-- {1, values} for a live entry (an empty list is still an entry), false for none.
local function read(k)
  local state = live(k)
  if not state then return false end
  if state == 'ordinary' then touch(k) end
  return {1, redis.call('LRANGE', V(k), 0, -1)}
end

if op == 'put' then
  local k, pinned, size = ARGV[7], ARGV[8] == '1', tonumber(ARGV[9])
  local ttl = map_ttl
  if ARGV[10] ~= '' then ttl = tonumber(ARGV[10]) end
  local last = 11 + tonumber(ARGV[11])
  local kept = put(k, ARGV, 12, last, size, pinned, ttl)
  if kept == 1 and #ARGV > last then
    for i = last + 1, #ARGV do
      redis.call('SADD', ITEMS(k), ARGV[i])
      redis.call('SET', ITEM(ARGV[i]), k)
    end
    backstop(k)
  end
  return kept
elseif op == 'get' then
  return read(ARGV[7])
elseif op == 'find' then
  local owner = redis.call('GET', ITEM(ARGV[7]))
  if not owner then return false end
  return read(owner)
elseif op == 'append' then
  -- ARGV[9]: '' (extend a live entry only, else -1), '+' (or create it from the items),
  -- '=<first>' (or create it from <first> and the items)
  local k, size, mode = ARGV[7], tonumber(ARGV[8]), ARGV[9]
  local state = live(k)
  if state then return extend(k, state, ARGV, 10, #ARGV, size) end
  if mode == '' then return -1 end
  local first = 10
  if string.sub(mode, 1, 1) == '=' then
    ARGV[9] = string.sub(mode, 2)
    size = size + #ARGV[9]
    first = 9
  end
  return put(k, ARGV, first, #ARGV, 2 + commas(0, #ARGV - first + 1) + size, false, map_ttl)
elseif op == 'set_first' then
  local k, value = ARGV[7], ARGV[8]
  local state = live(k)
  if not state then return 0 end
  if state == 'ordinary' then touch(k) end
  local first = redis.call('LINDEX', V(k), 0)
  if not first then return 0 end
  local growth = #value - #first
  redis.call('LSET', V(k), 0, value)
  return extend(k, live(k), ARGV, 1, 0, growth)
elseif op == 'remove_value' then
  local k, value = ARGV[7], ARGV[8]
  local state = live(k)
  if not state then return 0 end
  if state == 'ordinary' then touch(k) end
  local values = redis.call('LRANGE', V(k), 1, -1)
  local at = nil
  for i, v in ipairs(values) do
    if v == value then at = i break end
  end
  if not at then return 0 end
  -- LREM removes by value from the head: mark the one position, then remove the mark.
  local mark = '\0triode-removed\0'
  redis.call('LSET', V(k), at, mark)
  redis.call('LREM', V(k), 1, mark)
  return extend(k, live(k), ARGV, 1, 0, -(#value + 1))
elseif op == 'delete' then
  local k = ARGV[7]
  if not live(k) then return 0 end
  discard(k)
  add('ev_deleted', 1)
  return 1
elseif op == 'pin' then
  local k = ARGV[7]
  local state = live(k)
  if not state then return 0 end
  if state == 'pinned' then return 1 end
  local s = size_of(k)
  if stat('pinned_bytes') + s > max_bytes then return 0 end
  -- as BudgetedMap.pin: out of the ordinary entries (which forgets its items), into the pinned
  redis.call('ZREM', LRU, k)
  redis.call('ZREM', EXP, k)
  add('bytes', -s)
  forget(k)
  redis.call('SADD', PIN, k)
  add('pinned_bytes', s)
  redis.call('PERSIST', V(k))
  return 1
elseif op == 'unpin' then
  local k = ARGV[7]
  if not is_pinned(k) then
    if live(k) then return 1 end
    return 0
  end
  local s = size_of(k)
  redis.call('SREM', PIN, k)
  add('pinned_bytes', -s)
  return admit(k, s, now, tonumber(redis.call('HGET', TTL, k)))
elseif op == 'sweep' then
  return drop_expired()
elseif op == 'next_expiry' then
  local front = redis.call('ZRANGE', EXP, 0, 0, 'WITHSCORES')
  if #front == 0 then return false end
  return front[2]
elseif op == 'statistics' then
  local out = {redis.call('ZCARD', LRU) + redis.call('SCARD', PIN), redis.call('SCARD', PIN)}
  for _, f in ipairs({'bytes', 'pinned_bytes', 'ev_ttl', 'ev_lru', 'ev_bytes', 'ev_oversize',
                      'ev_deleted'}) do
    table.insert(out, stat(f))
  end
  return out
end
return redis.error_reply('unknown op ' .. tostring(op))
