-- A request's record kept, by settle.lua and record.lua (prepended to each when loaded):
-- its day and minute aggregates and its entry in the team's record stream.
-- aggs: (field, increment, ...) as store.agg_increments; the minute's fields are the day's with
-- the minute in place of the key. record: (field, value, ...) as UsageRecord.set_fields.
-- A tag's, end user's or session's field ("\30...": policies.attribution) goes to the day's
-- hash of such sums (the same {team} slot), kept DIMENSION_DAYS, with no minute copy.
local function keep(agg, aggm, log, maxrec, minute, aggs, record)
  local aggx, dims = agg .. ':x', false
  for j = 1, #aggs, 2 do
    local f, inc = aggs[j], aggs[j + 1]
    if string.byte(f, 1) == 30 then
      redis.call('HINCRBY', aggx, f, inc)
      dims = true
    else
      redis.call('HINCRBY', agg, f, inc)
      local at = string.find(f, '\31', 1, true)  -- (start, end): keep the start only
      redis.call('HINCRBY', aggm, minute .. string.sub(f, at), inc)
    end
  end
  if dims then redis.call('PEXPIRE', aggx, 35 * 86400000) end  -- store.DIMENSION_DAYS
  redis.call('PEXPIRE', agg, 400 * 86400000)
  redis.call('PEXPIRE', aggm, 7260000)  -- store.MINUTES_KEPT_MS
  redis.call('XADD', log, 'MAXLEN', '~', maxrec, '*', unpack(record))
end
