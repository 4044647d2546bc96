# expect 10: config value '0' is out of range
h3sig 1
meta model m
meta group g
meta torch t
meta cuda 13000
meta sm 90
meta created 2026-11-29
call 0 launch k
  config 0 1 1 32 1 1 0
end
