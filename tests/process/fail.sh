#!/bin/bash
echo "about to fail"
echo "something went wrong: $1" >&2
exit 3
