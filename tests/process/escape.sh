#!/bin/sh
# Leaves a daemon behind: a grandchild (double fork) in a session of its own, which no
# process-group signal reaches and which holds the job's output pipes; its pid goes to $1.
# Then sleeps.
(setsid sh -c 'echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 300' sh "$1" &)
while [ ! -f "$1" ]; do sleep 0.01; done
echo "left a daemon"
sleep 300
