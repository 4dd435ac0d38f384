#!/bin/sh
# Prints the environment a PROCESS job gets, one NAME=value a line.
env | sort
