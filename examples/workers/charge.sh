#!/bin/sh
# An activity for `wfhost worker`: the task's input arrives as JSON on stdin, the result goes
# out as JSON on stdout. Exit non-zero for an error worth retrying, 100 for one that is not.
#
#   wfhost worker --server http://127.0.0.1:8080 --function payments.charge -- sh charge.sh
input=$(cat)
echo "{\"charged\": $input, \"key\": \"$WFHOST_IDEMPOTENCY_KEY\", \"attempt\": $WFHOST_ATTEMPT}"
