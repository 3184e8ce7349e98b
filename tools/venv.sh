# Sourced by the scripts that need a Python venv (tests/compat/run.sh, tools/runtime-venv.sh,
# bench/setup.sh, bench/setup_tasks.sh). Venvs live in the machine's cache, outside the clone,
# keyed by the interpreter's version and the requirements' contents, so that a fresh clone on
# a machine that already made one (CI's own clone, a second checkout) finds it ready instead of
# installing jaxlib, TensorFlow, torch and Ray again; the clone's .venv paths are links to them.
# pip's wheel cache is not enough: unpacking torch and TensorFlow alone takes minutes. pip
# compiles no bytecode here (--no-compile): Python compiles what a test imports, when it does.
#
#   cohort_venv LINK PYTHON REQUIREMENTS...
#       makes LINK (e.g. .venv-bench) a link to the cached venv of PYTHON's version with every
#       REQUIREMENTS file installed, in order; creates and fills it first when no venv of that
#       key is complete. Returns pip's status; its output is then in $COHORT_VENV_LOG.
#   cohort_venv_path PYTHON REQUIREMENTS...   prints where that venv lives (made or not)
#   cohort_py_version PYTHON                  prints PYTHON's version (3.12.1)
#
# COHORT_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/cohort) is the cache's root; its venvs/
# folder can be removed at any time (the next run makes what it needs again).
: "${COHORT_CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/cohort}"

cohort_py_version() { "$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])'; }

cohort_venv_path() {
  local python=$1
  shift
  local key
  key=$({
    echo "python $(cohort_py_version "$python")"
    local req
    for req in "$@"; do
      echo "== $(basename "$req")"
      cat "$req"
    done
  } | sha256sum | cut -c1-16)
  echo "$COHORT_CACHE/venvs/$key"
}

cohort_venv() {
  local link=$1 python=$2
  shift 2
  local dir req lock
  dir=$(cohort_venv_path "$python" "$@") || return 1
  COHORT_VENV_LOG="$dir.pip.log"
  mkdir -p "$(dirname "$dir")"
  # One maker at a time per venv (make test prepares them in the background while it builds:
  # tools/prepare.sh); the others wait for it and then find it complete.
  exec {lock}>"$dir.lock"
  flock "$lock"
  if [[ ! -f "$dir/.complete" ]]; then
    echo "venv: making $dir for $link (Python $(cohort_py_version "$python"): $*)" >&2
    mkdir -p "$(dirname "$dir")"
    rm -rf "$dir"
    if ! "$python" -m venv "$dir" >"$COHORT_VENV_LOG" 2>&1; then
      exec {lock}>&-
      return 1
    fi
    for req in "$@"; do
      if ! timeout 1800 "$dir/bin/python" -m pip install --disable-pip-version-check --no-compile -q -r "$req" \
        >>"$COHORT_VENV_LOG" 2>&1; then
        exec {lock}>&-
        return 1
      fi
    done
    # What it holds, for whoever looks in the cache.
    printf '%s\n' "$@" >"$dir/.requirements"
    touch "$dir/.complete"
  fi
  exec {lock}>&-
  # A venv made in place by an older checkout (a real directory) gives way to the link.
  if [[ -e "$link" && ! -L "$link" ]]; then rm -rf "$link"; fi
  mkdir -p "$(dirname "$link")"
  ln -sfn "$dir" "$link"
}
