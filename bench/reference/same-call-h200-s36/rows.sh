# session 36: sourced by call1.sh and call2.sh after common.sh. /tmp/site-old: the packages of /tmp/site with the
# runtime as it was before session 35's Python change (5fb2972, carried in .carry/s36-before).
if [ ! -d /tmp/site-old ]; then
  mkdir -p /tmp/site-old && cp -a /tmp/site/. /tmp/site-old/
  ln -sfn "$PWD/.carry/s36-before/gguf_mtp" /tmp/site-old/gguf_mtp
  ln -sfn "$PWD/.carry/s36-before/cli" /tmp/site-old/gguf_mtp_cli
fi
# the old runtime's rows run from /tmp: `python -m` puts the working folder first on sys.path, where the repository's
# own gguf_mtp would win over /tmp/site-old's
REPO=$PWD
old() { (cd /tmp && PYTHONPATH="/tmp/site-old:$REPO" "$@"); }
rounds() {
  for i in $(seq 1 40); do [ "$(left)" -gt 50 ] || break
    lc; [ $((i % 2)) = 1 ] && spec 2
    GGUF_MTP_DRAFT_CHAIN=0 GGML_CUDA_GRAPH_REUSE_FAST_PATH=0 run k2 --spec-draft-n-max 2
    GGUF_MTP_DRAFT_CHAIN=0 GGML_CUDA_GRAPH_REUSE_FAST_PATH=0 old run k2-py0 --spec-draft-n-max 2
    run k2-cf --spec-draft-n-max 2
    if [ $((i % 3)) = 0 ]; then run auto-cf --spec-draft-n-max auto; GGUF_MTP_DRAFT_CHAIN=0 run auto --spec-draft-n-max auto; fi
  done
  grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
}
