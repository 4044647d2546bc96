# expect 1: empty file
