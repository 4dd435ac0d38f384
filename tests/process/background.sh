#!/bin/sh
# Leaves a process behind: "sleep 40 &" keeps the output pipes open after the script exits.
sleep 40 &
echo $! > "$1"
echo started
