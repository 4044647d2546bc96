# expect 11: uid 7 is not in the call's uids
h3sig 1
meta model m
meta group g
meta torch t
meta cuda 13000
meta sm 90
meta created 2026-11-29
call 0 cudnn
  uids 1 2
  slot 0 uid:7 0 first
end
