# Shared helpers of the reproduction recipes (ptb.sh, text8.sh, iwslt15_en_de.sh, multi30k.sh).
# Sourced, not run. Expects ROOT (the repository root) and NAME (the recipe's name, for messages)
# to be set; the recipe then calls parse_options, which sets DRY_RUN.
#
# Markers: a step whose output is complete writes "$dir/.done" holding the exact command it ran
# (with absolute paths; what is printed, and the results pages, show them with rel_text).
# A rerun skips the step only if the marker exists and holds the same command, so changing a
# setting (say MAX_EPOCH) reruns the step; a training step without its marker is simply started
# again and fairseq resumes it from checkpoint_last.pt in its save dir.

VENV=${VENV:-.venv}
case "$VENV" in /*) BIN="$VENV/bin" ;; *) BIN="$ROOT/$VENV/bin" ;; esac
PY="$BIN/python"
PLUGIN="$ROOT/fairseq_noising"

die() { echo "$NAME: $*" >&2; exit 1; }

# parse_options EXTRA ARGS...: the recipes' command line. --help prints the header comment of
# recipes/$NAME, --dry-run sets DRY_RUN=1, and --spm (accepted only when EXTRA is --spm) sets SPM=1;
# anything else is refused with exit status 2.
parse_options() {
  local extra=$1 arg; shift
  DRY_RUN=0
  for arg in "$@"; do
    case "$arg" in
      --help|-h) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$ROOT/recipes/$NAME"; exit 0 ;;
      --dry-run) DRY_RUN=1 ;;
      --spm) [ "$extra" = --spm ] || { echo "$NAME: unknown option $arg (expected --dry-run or --help)" >&2; exit 2; }
             SPM=1 ;;
      *) echo "$NAME: unknown option $arg (expected ${extra:+$extra, }--dry-run or --help)" >&2; exit 2 ;;
    esac
  done
}

check_env() {
  [ -x "$BIN/fairseq-train" ] || die "$BIN/fairseq-train not found: run 'bash recipes/setup.sh' first (or set VENV)"
}

# --cpu only when torch sees no CUDA device (DEVICE=cpu|cuda overrides the detection)
detect_device() {
  if [ -z "${DEVICE:-}" ]; then
    if [ "$("$PY" -c 'import torch;print(torch.cuda.is_available())' 2>/dev/null)" = True ]; then
      DEVICE=cuda
    else
      DEVICE=cpu
    fi
  fi
  DEVICE_ARGS=()
  [ "$DEVICE" = cuda ] || DEVICE_ARGS=(--cpu)
}

quote_cmd() {  # the command as one shell-quoted line (markers, cache keys; show_cmd for display)
  local out="" a
  for a in "$@"; do
    if [[ "$a" =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then out+="$a "; else out+="$(printf '%q' "$a") "; fi
  done
  printf '%s' "${out% }"
}

# Paths as results pages and printed commands show them (never the machine's absolute paths):
# relative to the repository root ROOT, where the recipes run; ../NAME for a path beside the
# repository (in its parent folder, e.g. ../shared/data/ptb); any other path as it is. Need ROOT.
#   rel_path PATH    one path (the relative form names the same file from ROOT, so it can be run)
#   rel_text TEXT    every such absolute path inside TEXT (a quoted command line, a note)
#   show_cmd CMD...  quote_cmd with repository-relative paths: for results pages and "+ " lines
_rel_roots() {  # sets _REL_PHYS (ROOT with symlinks resolved) and _REL_PARENT (its parent, or "")
  if [ "${_REL_FOR:-}" != "$ROOT" ]; then
    _REL_PHYS=$(cd "$ROOT" 2>/dev/null && pwd -P) || _REL_PHYS=$ROOT
    _REL_PARENT=${_REL_PHYS%/*}  # "" when the repository is a top-level folder: nothing is "beside" it
    _REL_FOR=$ROOT
  fi
}

rel_path() {  # PATH
  local p=$1 r
  _rel_roots
  for r in "$ROOT" "$_REL_PHYS"; do
    [ "$p" = "$r" ] && { printf '.\n'; return; }
    [[ "$p" == "$r"/* ]] && { printf '%s\n' "${p#"$r"/}"; return; }
  done
  # beside: only against the resolved parent, the folder that ".." from ROOT really is
  if [ -n "$_REL_PARENT" ] && [[ "$p" == "$_REL_PARENT"/* ]]; then
    printf '../%s\n' "${p#"$_REL_PARENT"/}"
  else
    printf '%s\n' "$p"
  fi
}

_ere_escape() { printf '%s' "$1" | sed 's/[][\.^$*+?(){}|#/]/\\&/g'; }

rel_text() {  # TEXT
  _rel_roots
  # a path starts at the start of a line or after a character that cannot be part of one
  # and ends before one that cannot ("ROOT." stays "../NAME.", never a misleading "..")
  local b='(^|[^A-Za-z0-9_.~/-])' end='($|[^A-Za-z0-9_.~/-])'
  local script="" r e n=0 seen=$'\n'
  # the root (resolved or not, and as quote_cmd escapes it) before its parent
  local roots=("$ROOT" "$_REL_PHYS" "$(printf '%q' "$ROOT")" "$(printf '%q' "$_REL_PHYS")")
  for r in "${roots[@]}"; do
    [[ "$seen" == *$'\n'"$r"$'\n'* ]] && continue; seen+="$r"$'\n'
    e=$(_ere_escape "$r"); n=$((n + 1))
    script+="s#$b$e/#\\1#g"$'\n'":root$n"$'\n'"s#$b$e$end#\\1.\\2#"$'\n'"t root$n"$'\n'
  done
  if [ -n "$_REL_PARENT" ]; then
    for r in "$_REL_PARENT" "$(printf '%q' "$_REL_PARENT")"; do
      [[ "$seen" == *$'\n'"$r/"$'\n'* ]] && continue; seen+="$r/"$'\n'
      script+="s#$b$(_ere_escape "$r")/#\\1../#g"$'\n'
    done
  fi
  printf '%s\n' "$1" | sed -E "$script"
}

show_cmd() {  # CMD...
  rel_text "$(quote_cmd "$@")"
}

run() {  # prints a command, then runs it unless --dry-run
  echo "+ $(show_cmd "$@")"
  [ "$DRY_RUN" = 1 ] || "$@"
}

is_done() {  # dir, command string: true when the step in dir finished with exactly this command
  [ -f "$1/.done" ] && [ "$(cat "$1/.done")" = "$2" ]
}

mark_done() {  # dir, command string
  [ "$DRY_RUN" = 1 ] || printf '%s' "$2" > "$1/.done"
}

# step_needed DIR LINE: says whether the step runs ("+ LINE") or is finished ("= done already");
# false when it is finished or this is a dry run
step_needed() {
  if is_done "$1" "$2"; then echo "= done already: $(rel_text "$2")"; return 1; fi
  echo "+ $(rel_text "$2")"
  [ "$DRY_RUN" != 1 ]
}

# fresh_step DIR CMD...: a step whose output folder is rebuilt from scratch unless finished
fresh_step() {
  local dir=$1; shift
  local line; line=$(quote_cmd "$@")
  step_needed "$dir" "$line" || return 0
  rm -rf "$dir"; mkdir -p "$dir"
  "$@" || die "step failed: $line"
  mark_done "$dir" "$line"
}

# train_step SAVE_DIR CMD...: fairseq-train with its progress on stdout and in SAVE_DIR/train.log;
# an unfinished run resumes from SAVE_DIR/checkpoint_last.pt
train_step() {
  local dir=$1; shift
  local line; line=$(quote_cmd "$@")
  step_needed "$dir" "$line" || return 0
  mkdir -p "$dir"
  [ -f "$dir/checkpoint_last.pt" ] && echo "$NAME: resuming from $dir/checkpoint_last.pt"
  set +e
  "$@" 2>&1 | tee -a "$dir/train.log"
  local rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" = 0 ] || die "training failed (exit $rc), see $dir/train.log; rerun to resume"
  [ -f "$dir/checkpoint_best.pt" ] || die "training wrote no $dir/checkpoint_best.pt, see $dir/train.log"
  mark_done "$dir" "$line"
}

# cached_value FILE INPUT CMD...: runs CMD (which prints one value on its last stdout line) once
# and keeps the value in FILE; a rerun reads FILE as long as it holds the same command and is newer
# than INPUT (the checkpoint evaluated: a retrained checkpoint is evaluated again). Prints the value.
cached_value() {
  local file=$1 input=$2; shift 2
  local line; line=$(quote_cmd "$@")
  if [ -f "$file" ] && [ "$file" -nt "$input" ] && [ "$(sed -n 2p "$file")" = "$line" ]; then
    sed -n 1p "$file"; return 0
  fi
  local value
  value=$("$@" | tail -1) || die "failed: $line"
  [ -n "$value" ] || die "no value from: $line"
  printf '%s\n%s\n' "$value" "$line" > "$file.part" && mv "$file.part" "$file"
  echo "$value"
}

# fetch URL DEST: downloads to DEST (via DEST.part) unless DEST exists; clear message on failure
fetch() {
  local url=$1 dest=$2 hint=$3
  [ -s "$dest" ] && return 0
  echo "+ curl -fL --retry 2 -o $(rel_path "$dest.part") $url"
  [ "$DRY_RUN" = 1 ] && return 0
  mkdir -p "$(dirname "$dest")"
  if ! curl -fL --retry 2 --connect-timeout 20 -o "$dest.part" "$url"; then
    rm -f "$dest.part"
    die "could not download $url. $hint"
  fi
  mv "$dest.part" "$dest"
}
