#!/usr/bin/env bash
# Installs PyPI's pymqttbench 0.1.1 (IBM, 2017), the second MQTT load
# generator nobody here wrote that bench/mqtt_vs_loadgen.sh runs. It is
# Python 2 code (`string.lowercase`: on Python 3 every publisher dies with
# AttributeError before it connects), so it runs on a Python 2.7 (pyenv's
# 2.7.18 on these machines; PYTHON2 names another), with paho-mqtt 1.6.1
# (the last for Python 2; never the paho-mqtt 2.1.0 the tests use),
# numpy 1.16.6 and pbr 7.1.3, all pinned, in a directory of their own
# (pip --target; Python 2.7 has no venv module).
#
# Machine-wide, once: into ~/.cache/megaconn-pymqttbench-0.1.1, only when
# its launcher is missing. Prints the launcher's path on stdout (a script
# that execs Python 2.7 on pymqttbench's entry point).
set -euo pipefail
dir="${XDG_CACHE_HOME:-$HOME/.cache}/megaconn-pymqttbench-0.1.1"
launcher="$dir/pymqttbench"
if [ -x "$launcher" ]; then
  echo "$launcher"
  exit 0
fi
py=""
for c in ${PYTHON2:-} /usr/bin/python2.7 "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/2.7*/bin/python2.7; do
  if [ -x "$c" ] && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (2, 7))' 2>/dev/null; then py=$c; break; fi
done
if [ -z "$py" ]; then
  echo "install_pymqttbench: no Python 2.7 found (pymqttbench 0.1.1 is Python 2 code): install one (pyenv install 2.7.18) or set PYTHON2" >&2
  exit 1
fi
echo "install_pymqttbench: pymqttbench 0.1.1 (paho-mqtt 1.6.1, numpy 1.16.6) for $py into $dir (once per machine)" >&2
rm -rf "$dir.tmp"
nice -n 19 "$py" -m pip install -q --disable-pip-version-check --no-warn-script-location --target "$dir.tmp/lib" \
  pymqttbench==0.1.1 paho-mqtt==1.6.1 numpy==1.16.6 pbr==7.1.3 setuptools==44.1.1 >&2
printf '#!/bin/sh\n# pymqttbench 0.1.1 on Python 2.7 (scripts/install_pymqttbench.sh)\nPYTHONPATH="%s" exec "%s" "%s" "$@"\n' \
  "$dir/lib" "$py" "$dir/lib/bin/pymqttbench" > "$dir.tmp/pymqttbench"
chmod +x "$dir.tmp/pymqttbench"
rm -rf "$dir"
mv "$dir.tmp" "$dir"
echo "$launcher"
