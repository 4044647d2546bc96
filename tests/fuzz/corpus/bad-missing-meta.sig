# expect 8: missing meta created
h3sig 1
meta model m
meta group g
meta torch t
meta cuda 13000
meta sm 90
end
