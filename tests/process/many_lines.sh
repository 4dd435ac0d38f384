#!/bin/sh
# Prints $1 numbered lines to stdout (JOBLOG keeps the head and the tail of a run's output).
i=0
while [ "$i" -lt "$1" ]; do
    printf 'out %04d\n' "$i"
    i=$((i + 1))
done
