#!/bin/sh
# Allocates $1 MiB in one piece (a Python bytearray) and prints "allocated".
exec python3 -c "import sys; b = bytearray(int(sys.argv[1]) * 1024 * 1024); print('allocated')" "$1"
