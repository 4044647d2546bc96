# expect 7: meta created must be YYYY-MM-DD
h3sig 1
meta model m
meta group g
meta torch t
meta cuda 13000
meta created 29-11-2026
