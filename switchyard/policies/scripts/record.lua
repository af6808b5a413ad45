-- Record a request refused before admission (no counter to move): its day and minute aggregates
-- and its entry in the team's record stream, as the end of settle.lua does.
-- KEYS: the team's day aggregate HASH, minute aggregate HASH, record STREAM.
-- ARGV: max records, epoch minute, then two msgpack arrays (as settle.lua's): the aggregates'
--       (field, increment, ...) and the record's (field, value, ...).
local maxrec, minute, aggs = ARGV[1], ARGV[2], cmsgpack.unpack(ARGV[3])
-- A tag's, end user's or session's field ("\30...": policies.attribution) goes to the day's
-- hash of such sums (the same {team} slot), kept DIMENSION_DAYS, with no minute copy.
local aggx, dims = KEYS[1] .. ':x', false
for j = 1, #aggs, 2 do
  local f, inc = aggs[j], aggs[j + 1]
  if string.byte(f, 1) == 30 then
    redis.call('HINCRBY', aggx, f, inc)
    dims = true
  else
    redis.call('HINCRBY', KEYS[1], f, inc)
    local at = string.find(f, '\31', 1, true)  -- (start, end): keep the start only
    redis.call('HINCRBY', KEYS[2], minute .. string.sub(f, at), inc)
  end
end
if dims then redis.call('PEXPIRE', aggx, 35 * 86400000) end  -- store.DIMENSION_DAYS
redis.call('PEXPIRE', KEYS[1], 400 * 86400000)
redis.call('PEXPIRE', KEYS[2], 7260000)  -- store.MINUTES_KEPT_MS
redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxrec, '*', unpack(cmsgpack.unpack(ARGV[4])))
return 1
