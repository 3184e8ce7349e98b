# Sourced by tests/compat/run.sh and bench/setup.sh, which both need Python >= 3.12 for
# jax 0.11 and later while Debian 12's python3 is 3.11.
# find_python X.Y: prints an interpreter of that version that can make venvs, from PATH,
# pyenv or /usr/bin; fails when there is none.
find_python() {
  local want=$1 c
  local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
  for c in "python$want" $(ls -d "$pyenv_root"/versions/"$want".*/bin/python"$want" 2>/dev/null | sort -rV) \
           "/usr/bin/python$want"; do
    if "$c" -c 'import venv, ensurepip' >/dev/null 2>&1; then echo "$c"; return 0; fi
  done
  return 1
}
