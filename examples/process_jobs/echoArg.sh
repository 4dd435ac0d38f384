#!/bin/bash
echo "Total Arguments : $#"
echo "1st Argument = $1"
echo "2nd Argument = $2"
