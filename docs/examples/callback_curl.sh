#!/bin/sh
# Complete a callback from a shell (the callbacks how-to; run by the test suite).
# Reads AWA_URL (where awa_django.urls is included, e.g. https://app.example.com/awa),
# AWA_CALLBACK_SECRET and CALLBACK_ID from the environment.
set -eu
# [curl]
url="$AWA_URL/callbacks/$CALLBACK_ID/complete"
path="/${url#*://*/}"   # the URL without scheme and host, e.g. /awa/callbacks/<id>/complete
body='{"payload": {"invoice": 42}}'
timestamp=$(date +%s)
signature=$(printf '%s.POST.%s.%s' "$timestamp" "$path" "$body" \
  | openssl dgst -sha256 -hmac "$AWA_CALLBACK_SECRET" -r | cut -d' ' -f1)
curl --silent --show-error --fail-with-body \
  -H 'Content-Type: application/json' \
  -H "X-Awa-Timestamp: $timestamp" \
  -H "X-Awa-Signature: $signature" \
  --data-binary "$body" \
  "$url"
# [/curl]
