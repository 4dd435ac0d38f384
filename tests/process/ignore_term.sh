#!/bin/bash
# A PROCESS job that ignores SIGTERM and starts a child: only killing its process group ends it.
# $1 (optional): a file to create once SIGTERM is ignored (a test can tell a TERM that came
# before the trap on a stalled machine from one that was ignored).
trap '' TERM
[ -n "${1:-}" ] && touch "$1"
echo "started $$"
sleep 3600 &
wait
