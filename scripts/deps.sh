#!/usr/bin/env bash
# Installs the Debian packages runner needs, only those missing (idempotent), with sudo
# when not root. Usage: scripts/deps.sh [--test|--fuzz]   (--test adds what the test suite
# uses: PyTorch for golden fixtures, clang + libFuzzer for the fuzz stage; --fuzz only the
# latter).
set -euo pipefail
pkgs=(build-essential cmake pkg-config libyaml-dev zlib1g-dev libcurl4-openssl-dev
      libopenblas-dev libdnnl-dev libjpeg62-turbo-dev libpng-dev dataset-fashion-mnist python3)
if [[ "${1:-}" == "--test" ]]; then
  # python3-pil: the JPEG/PNG decoders are checked against PIL; python3-skimage: its
  # photographs are the real-image test folder and the JPEG loader benchmark's source
  pkgs+=(python3-torch python3-torchvision python3-numpy python3-pil python3-skimage)
fi
# --test and --fuzz: clang with libFuzzer and the sanitizer runtimes (tests/fuzz), util-linux
# for unshare (the full-tmpfs case of tests/fault)
if [[ "${1:-}" == "--test" || "${1:-}" == "--fuzz" ]]; then
  pkgs+=(clang libclang-rt-14-dev util-linux)
fi
missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  echo "installing: ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
