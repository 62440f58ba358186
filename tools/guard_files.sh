# shellcheck shell=bash
# Sourced by tools/check_format.sh, tools/check_tidy.sh and tools/format_all.sh: which C++ / CUDA
# files a guard looks at. `guard_files ARGS...` prints one path a line (relative to the root):
#   (nothing)      the files changed by the last commit: `git diff --name-only HEAD~1` (plus what
#                  is modified in the work tree), or every tracked file when HEAD has no parent
#                  (a first commit, a shallow clone of depth 1)
#   --base REV     the files changed since REV (e.g. --base origin/main)
#   --all          every tracked file
#   FILE...        these files
# Deleted files are left out (generated tables keep their layout inside `// clang-format off`).
GUARD_PATTERNS=('*.cpp' '*.cc' '*.c' '*.h' '*.hpp' '*.cu' '*.cuh')

guard_files() {
  local mode=last base="" files=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --all) mode=all ;;
      --base) [ $# -ge 2 ] || { echo "--base needs a revision" >&2; return 2; }
              mode=base; base="$2"; shift ;;
      --base=*) mode=base; base="${1#--base=}" ;;
      -*) echo "unknown option '$1'; expected --all, --base REV or files" >&2; return 2 ;;
      *) mode=files; files+=("$1") ;;
    esac
    shift
  done
  if [ "$mode" = last ]; then
    if git rev-parse -q --verify HEAD~1 >/dev/null; then
      mode=base; base=HEAD~1
    else
      echo "(HEAD has no parent: checking every tracked file)" >&2
      mode=all
    fi
  fi
  case "$mode" in
    all) git ls-files -- "${GUARD_PATTERNS[@]}" ;;
    base) git rev-parse -q --verify "$base^{commit}" >/dev/null ||
            { echo "'$base' is not a commit" >&2; return 2; }
          git diff --name-only --diff-filter=d "$base" -- "${GUARD_PATTERNS[@]}" ;;
    files) printf '%s\n' "${files[@]}" ;;
  esac
}

# guard_tool PROGRAM SCRIPT: exit 2 naming SCRIPT when PROGRAM is not installed.
guard_tool() {
  command -v "$1" >/dev/null ||
    { echo "$2: no $1 (scripts/install_deps.sh installs it)" >&2; exit 2; }
}
