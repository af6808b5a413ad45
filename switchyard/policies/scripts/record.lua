-- Record a request refused before admission (no counter to move): its day and minute aggregates
-- and its entry in the team's record stream, as the end of settle.lua does (keep.lua).
-- KEYS: the team's day aggregate HASH, minute aggregate HASH, record STREAM.
-- ARGV: max records, epoch minute, then two msgpack arrays (as settle.lua's): the aggregates'
--       (field, increment, ...) and the record's (field, value, ...).
keep(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], cmsgpack.unpack(ARGV[3]), cmsgpack.unpack(ARGV[4]))
return 1
