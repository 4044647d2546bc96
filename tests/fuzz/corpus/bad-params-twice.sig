# expect 5: params: one per launch call
h3sig 1
call 0 launch k
  params
  params 4
