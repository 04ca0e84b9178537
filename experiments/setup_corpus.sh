#!/usr/bin/env bash
# Installs the Section H pre-training corpus: WordNet 3.0 from Debian's `wordnet-base`
# (glosses and example sentences; WordNet licence) into /usr/share/wordnet.
#   bash experiments/setup_corpus.sh
# Without apt-get (or root/sudo), point --config.data.wordnet_dir or $WORDNET_DIR at a
# directory holding data.noun, data.verb, data.adj and data.adv instead.
set -euo pipefail
if [ -f /usr/share/wordnet/data.noun ]; then
  echo "WordNet already installed in /usr/share/wordnet"; exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "error: apt-get not found; install WordNet 3.0 yourself and set \$WORDNET_DIR" >&2; exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq wordnet-base
test -f /usr/share/wordnet/data.noun && echo "WordNet installed in /usr/share/wordnet"
