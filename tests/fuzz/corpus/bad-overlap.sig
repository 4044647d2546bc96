# expect 13: overlaps
h3sig 1
meta model m
meta group g
meta torch t
meta cuda 13000
meta sm 90
meta created 2026-11-29
call 0 launch k
  config 1 1 1 32 1 1 0
  params 16
  bytes 0 4 00000000
  slot 0 0 0 first
end
