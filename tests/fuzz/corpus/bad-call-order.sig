# expect 9: call index must be 0
h3sig 1
meta model m
meta group g
meta torch t
meta cuda 13000
meta sm 90
meta created 2026-11-29
call 1 launch k
end
