#!/usr/bin/env bash
# Installs the Debian packages strata needs to build and test, if missing.
# Runs apt-get only when something is absent, so repeated calls are quick.
# Arguments name further packages to install the same way (tools/run_tests.sh
# adds the sanitizer and fuzzing builds' compilers).
set -euo pipefail

# libopenmpi-dev + openmpi-bin: the mpi communication backend and its tests (mpirun).
# libfabric-dev: the rdma transport (verbs on InfiniBand/RoCE; tests use its tcp provider).
# libjpeg62-turbo-dev: JPEG decoded as PIL decodes it (without it stb decodes JPEG, up to ~11 levels off).
# liblmdb-dev, libleveldb-dev, libhdf5-dev: Caffe's LMDB/LevelDB databases (Data layer) and
# HDF5 files (HDF5Data, HDF5Output); each is optional to the build.
# The CUDA backend is optional and not installed here: CMake builds it when it
# finds nvcc, and then needs cuBLAS and cuDNN 9 (CUDA toolkit + cudnn packages
# from NVIDIA); without nvcc, or with -DSTRATA_CUDA=OFF, the build is CPU-only.
packages=(build-essential cmake libopenblas-dev libgtest-dev libgmock-dev libstb-dev libjpeg62-turbo-dev libopenmpi-dev openmpi-bin
          libfabric-dev liblmdb-dev libleveldb-dev libhdf5-dev "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
