#!/bin/sh
# Prints each of its arguments on a line of its own.
printf "%s\n" "$@"
