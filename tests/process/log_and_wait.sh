#!/bin/sh
# Prints a line, waits until the file $1 exists (the test makes it), prints another
# (JOBLOG ... FOLLOW shows a PROCESS job's output as it comes).
echo "out: before the gate"
i=0
while [ ! -e "$1" ] && [ "$i" -lt 1200 ]; do
    sleep 0.05
    i=$((i + 1))
done
echo "out: after the gate"
echo "err: a line on stderr" >&2
