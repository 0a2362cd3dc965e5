#!/bin/sh
# Registers the namespace toolgate runs in, and toolgate's search
# attributes, on the Temporal server of docker-compose.yml. Safe to run on
# every start: an existing namespace is kept as it is, and registering a
# search attribute that exists is a no-op. (Workers also register missing
# attributes when they start, if they are allowed to; this makes the
# compose stack independent of that.)
#
# Run by the temporal-namespace service (temporalio/admin-tools image).
set -eu

: "${TEMPORAL_ADDRESS:?}" "${TEMPORAL_NAMESPACE:?}"
RETENTION=${TEMPORAL_NAMESPACE_RETENTION:-168h}

echo "temporal-namespace: waiting for $TEMPORAL_ADDRESS"
tries=0
until temporal operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; do
  tries=$((tries + 1))
  if [ "$tries" -ge 60 ]; then
    echo "temporal-namespace: $TEMPORAL_ADDRESS is not healthy after 60 tries" >&2
    exit 1
  fi
  sleep 2
done

if temporal operator namespace describe --address "$TEMPORAL_ADDRESS" --namespace "$TEMPORAL_NAMESPACE" >/dev/null 2>&1; then
  echo "temporal-namespace: namespace $TEMPORAL_NAMESPACE exists"
else
  temporal operator namespace create --address "$TEMPORAL_ADDRESS" --namespace "$TEMPORAL_NAMESPACE" --retention "$RETENTION"
fi

# The list of workflows.SearchAttributeTypes() in toolgate's source.
temporal operator search-attribute create --address "$TEMPORAL_ADDRESS" --namespace "$TEMPORAL_NAMESPACE" \
  --name ToolgateStatus --type Keyword \
  --name ToolgateTool --type Keyword \
  --name ToolgateSession --type Keyword \
  --name ToolgateRequestedAt --type Datetime \
  --name ToolgateRequester --type Keyword \
  --name ToolgateDecidedBy --type Keyword \
  --name ToolgateChannel --type Keyword \
  --name ToolgateGroups --type KeywordList \
  --name ToolgateWaiting --type Int \
  --name ToolgateStickyKey --type Keyword
echo "temporal-namespace: done"
