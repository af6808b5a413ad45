-- Record a request refused before admission (no counter to move): its day and minute aggregates
-- and its entry in the team's record stream, as the end of settle.lua does.
-- KEYS: the team's day aggregate HASH, minute aggregate HASH, record STREAM.
-- ARGV: max records, epoch minute, n aggregate fields, n (field, increment) pairs, then the
--       record's field/value pairs.
local maxrec, minute, nagg = ARGV[1], ARGV[2], tonumber(ARGV[3])
for j = 0, nagg - 1 do
  local f, inc = ARGV[4 + 2 * j], ARGV[5 + 2 * j]
  redis.call('HINCRBY', KEYS[1], f, inc)
  if string.byte(f, 1) ~= 30 then  -- tags, end users, sessions: by day only
    local at = string.find(f, '\31', 1, true)  -- (start, end): keep the start only
    redis.call('HINCRBY', KEYS[2], minute .. string.sub(f, at), inc)
  end
end
redis.call('PEXPIRE', KEYS[1], 400 * 86400000)
redis.call('PEXPIRE', KEYS[2], 7260000)  -- store.MINUTES_KEPT_MS
local rec = {}
for j = 4 + 2 * nagg, #ARGV do rec[#rec + 1] = ARGV[j] end
redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxrec, '*', unpack(rec))
return 1
