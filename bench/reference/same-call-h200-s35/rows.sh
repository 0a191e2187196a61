# session 35: rounds of llama-completion and `run` k=2 on the shipped path (chain off), with the head's decode fed
# behind the verify, with the drafts chained, and on the shipped path with 0009's fast path off (sourced after
# common.sh; until $(left) falls to 45 s)
rounds() {
  for i in $(seq 1 40); do [ "$(left)" -gt 45 ] || break
    lc; GGUF_MTP_DRAFT_CHAIN=0 run k2 --spec-draft-n-max 2
    GGUF_MTP_DRAFT_CHAIN=0 GGUF_MTP_DEVICE_FEED=1 run k2-feed --spec-draft-n-max 2
    run k2-chain --spec-draft-n-max 2
    GGUF_MTP_DRAFT_CHAIN=0 GGML_CUDA_GRAPH_REUSE_FAST_PATH=0 run k2-fp0 --spec-draft-n-max 2
  done
  grep -h "MTP:\|llama.cpp patches" /tmp/err-k2*.txt | sort | uniq -c
}
