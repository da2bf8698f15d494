# A trainer that says ready, then waits; on SIGTERM it reports a checkpoint
# at step 7 and exits 143 (128 + SIGTERM), as the reference trainer does.
trap 'echo "{\"event\":\"checkpoint\",\"step\":7,\"path\":\"ckpt-7\"}"; exit 143' TERM
echo ready
sleep 1000 &
wait
