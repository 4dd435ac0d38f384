#!/bin/bash
# A PROCESS job that ignores SIGTERM and starts a child: only killing its process group ends it.
trap '' TERM
echo "started $$"
sleep 3600 &
wait
