#!/usr/bin/env bash
# Builds this example and exercises it over real HTTP; `make test` in the repository runs it.
# The app mounts the repository's pipelines/: a signed GET, a 304, Accept choosing WebP, an upload
# stored by the pipeline's output:, uploads refused (413, 415), and 429 with Retry-After under load.
set -euo pipefail
cd "$(dirname "$0")"
# Built in the scratch path the repository's examples share, so that PipelineKit is compiled once.
scratch=../.build-examples
../../.ci/quiet.sh swift build --scratch-path "$scratch" --product hummingbird-app \
  || { echo "example: retrying with a clean build" >&2; rm -rf "$scratch"; ../../.ci/quiet.sh swift build --scratch-path "$scratch" --product hummingbird-app; }
bin="$scratch/debug/hummingbird-app"
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work" out .cache' EXIT
export PIPELINECTL_KEYS="main:$(python3 -c "import secrets; print(secrets.token_hex(32))")"
cd "$work"
"$OLDPWD/$bin" --pipelines "$OLDPWD/../../pipelines" --port 0 --jobs 1 --queue 0 > app.log 2> app.err &
pid=$!
for _ in $(seq 600); do grep -q "listening on" app.log 2>/dev/null && break; kill -0 $pid || { cat app.err; exit 1; }; sleep 0.1; done
port=$(sed -n 's/^listening on \([0-9]*\).*/\1/p' app.log)
[ -n "$port" ] || { cat app.log app.err; echo "example: the app did not start" >&2; exit 1; }
python3 - "$port" <<'PY'
import base64, concurrent.futures, http.client, json, subprocess, sys, urllib.parse
port = int(sys.argv[1])

def request(method, path, body=None, headers={}):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data

def image(spec, size, fmt="jpg", quality=85):
    return subprocess.run(["convert", "-size", size, spec, "-quality", str(quality), f"{fmt}:-"], check=True, capture_output=True).stdout

def fail(message):
    sys.exit("example check failed: " + message)

def link(pipeline, source):
    status, _, body = request("GET", f"/link/{pipeline}?source=" + urllib.parse.quote(source, safe=""))
    if status != 200: fail(f"signing: {status} {body[:200]!r}")
    return body.decode().strip()

source = "data:image/jpeg;base64," + base64.b64encode(image("plasma:", "320x200")).decode()
path = link("product-images", source)
status, headers, body = request("GET", path, headers={"Accept": "image/jpeg"})
if status != 200 or headers.get("content-type") != "image/jpeg": fail(f"signed GET: {status} {headers} {body[:200]!r}")
etag = headers["etag"]
status, _, _ = request("GET", path, headers={"Accept": "image/jpeg", "If-None-Match": etag})
if status != 304: fail(f"If-None-Match: {status}")
# A transparent image: WebP for a client that takes it (JPEG has no alpha), PNG for one that does not.
alpha = subprocess.run(["convert", "-size", "200x200", "radial-gradient:white-none", "png:-"], check=True, capture_output=True).stdout
alpha_path = link("product-images", "data:image/png;base64," + base64.b64encode(alpha).decode())
status, headers, _ = request("GET", alpha_path, headers={"Accept": "image/webp,*/*"})
if status != 200 or headers.get("content-type") != "image/webp" or headers.get("vary") != "Accept": fail(f"Accept WebP: {status} {headers}")
status, headers, _ = request("GET", alpha_path, headers={"Accept": "image/jpeg,image/png"})
if status != 200 or headers.get("content-type") != "image/png": fail(f"no WebP in Accept: {status} {headers}")
status, _, body = request("GET", path.replace("/img/", "/img/A"), headers={})
if status != 403 or json.loads(body)["title"] != "bad_signature": fail(f"a bad signature: {status} {body[:200]!r}")

# An upload, stored by the avatars pipeline's output: (out/avatars, relative to the app).
status, _, body = request("POST", "/upload/avatars", body=image("gradient:navy-orange", "300x200"), headers={"Content-Type": "image/jpeg"})
stored = body.decode().split()
if status != 200 or len(stored) != 1 or not stored[0].startswith("out/avatars/"): fail(f"upload: {status} {body[:300]!r}")
size = subprocess.run(["identify", "-format", "%m %wx%h", stored[0]], check=True, capture_output=True, text=True).stdout
if size != "PNG 128x128": fail(f"the stored avatar is {size}")
for body, headers, want in [(b"<html>not an image</html>", {"Content-Type": "image/jpeg"}, (415, "not_an_image")),
                            (b"hello", {"Content-Type": "text/plain"}, (415, "unsupported_media_type")),
                            (b"", {"Content-Type": "image/png"}, (400, "empty_upload"))]:
    status, _, answer = request("POST", "/upload/avatars", body=body, headers=headers)
    if (status, json.loads(answer)["title"]) != want: fail(f"upload {headers} {body[:20]!r}: {status} {answer[:200]!r}, wanted {want}")
# A 2 GB body is refused from its Content-Length, before it is read.
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
conn.putrequest("POST", "/upload/avatars")
conn.putheader("Content-Type", "image/jpeg")
conn.putheader("Content-Length", str(2 << 30))
conn.endheaders()
conn.send(b"\xff\xd8" * 1000)
response = conn.getresponse()
if response.status != 413 or json.loads(response.read())["title"] != "too_large": fail(f"a 2 GB upload: {response.status}")
conn.close()
if subprocess.run(["sh", "-c", "ls out/avatars | wc -l"], capture_output=True, text=True).stdout.strip() != "1": fail("a refused upload wrote something")

# One job and no queue: of 24 new images asked at once, some are refused with 429 and Retry-After.
sources = [link("avatars", "data:image/jpeg;base64," + base64.b64encode(image("plasma:", "400x300", quality=30 + i)).decode()) for i in range(24)]
for attempt in range(5):
    with concurrent.futures.ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(lambda p: request("GET", p), sources))
    busy = [h for s, h, _ in answers if s == 429]
    if busy: break
if not busy or any(h.get("retry-after") != "1" for h in busy): fail(f"no 429 with Retry-After among {[s for s, _, _ in answers]}")
if any(s not in (200, 429) for s, _, _ in answers): fail(f"answers under load: {[s for s, _, _ in answers]}")
print(f"example check: signed GET, 304, WebP by Accept, upload stored, 415/400/413 refused, {len(busy)} of 24 refused with 429")
PY
grep -q '"status":429' app.log || { echo "example check failed: no 429 in the access log" >&2; exit 1; }
