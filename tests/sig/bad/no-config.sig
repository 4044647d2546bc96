# expect 9: needs config and params
h3sig 1
meta model m
meta group g
meta torch t
meta cuda 13000
meta sm 90
meta created 2026-11-29
call 0 launch k
  params 4
end
