# expect 2: format version 2 is not supported
h3sig 2
