#!/bin/sh
# Prints $1 bytes of short lines ("y") to stdout, and one line to stderr.
yes | head -c "$1"
echo "flood done" >&2
