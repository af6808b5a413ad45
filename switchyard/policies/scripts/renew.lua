-- Push live leases' expiry ttl ms past now (Redis TIME). KEYS[i] is the lease ZSET of ARGV[i + 1].
-- ZADD XX: a lease already released or expired stays gone.
local t = redis.call('TIME')
local exp = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 1, #KEYS do
  if redis.call('ZADD', KEYS[i], 'XX', 'CH', exp, ARGV[i + 1]) == 1 then
    redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[1]) * 2)  -- the set outlives its leases
  end
end
return #KEYS
