# Sourced by the Vulkan checks: unless VK_ICD_FILENAMES / VK_DRIVER_FILES name a driver, use Mesa's lavapipe (a
# Vulkan device on the CPU) and make ggml-vulkan see it. $1: the caller's name for its error line.
if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ]; then
    LVP="$(ls /usr/share/vulkan/icd.d/lvp_icd."$(uname -m)".json /usr/share/vulkan/icd.d/lvp_icd*.json 2>/dev/null | head -n 1 || true)"
    [ -n "$LVP" ] || { echo "${1:-vulkan}: lavapipe not found (apt-get install mesa-vulkan-drivers)" >&2; exit 2; }
    export VK_ICD_FILENAMES="$LVP" VK_DRIVER_FILES="$LVP"  # old and new loader names
    # ggml-vulkan skips CPU-type devices (lavapipe is one) unless they are named explicitly
    export GGML_VK_VISIBLE_DEVICES="${GGML_VK_VISIBLE_DEVICES:-0}"
fi
