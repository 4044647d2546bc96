# expect 2: not an h3shim signature file
hello 1
