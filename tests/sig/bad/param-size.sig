# expect 11: parameter size '0' must be 1 to 4096
h3sig 1
meta model m
meta group g
meta torch t
meta cuda 13000
meta sm 90
meta created 2026-11-29
call 0 launch k
  config 1 1 1 32 1 1 0
  params 4 0
end
