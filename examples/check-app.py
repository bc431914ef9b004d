#!/usr/bin/env python3
"""Exercises an example app over real HTTP (examples/*/check.sh run it after starting the app).

The app mounts the repository's pipelines/ under /img, signs links at /link/PIPELINE?source=,
and takes uploads at /upload/PIPELINE: a signed GET, a 304, Accept choosing WebP or PNG, a bad
signature, an upload stored by the pipeline's output:, uploads refused (413, 415, 400), a client
that goes away mid-request, and 429 with Retry-After under load.

    check-app.py PORT LOG --upload raw|multipart --disconnect cancels|completes
"""
import argparse, base64, concurrent.futures, http.client, json, os, socket, subprocess, sys, time, urllib.parse, uuid

parser = argparse.ArgumentParser()
parser.add_argument("port", type=int)
parser.add_argument("log", help="the app's standard output: its access log")
parser.add_argument("--upload", choices=["raw", "multipart"], required=True)
parser.add_argument("--disconnect", choices=["cancels", "completes"], required=True,
                    help="what a client's going away does to its work: Hummingbird cancels it; Vapor 4 cannot tell (vapor/vapor#3354)")
args = parser.parse_args()
port = args.port

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

def multipart(fields):
    """A multipart/form-data body of (name, filename, content type, bytes) parts."""
    boundary = uuid.uuid4().hex
    out = b""
    for name, filename, kind, data in fields:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{boundary}\r\nContent-Disposition: {disposition}\r\nContent-Type: {kind}\r\n\r\n".encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"

def upload(data, kind="image/jpeg", field="file"):
    """POSTs an image to /upload/avatars, raw or as the file part of a form."""
    if args.upload == "raw":
        return request("POST", "/upload/avatars", body=data, headers={"Content-Type": kind})
    form, content_type = multipart([("note", None, "text/plain", b"a field beside the file"), (field, "cat.jpg", kind, data)])
    return request("POST", "/upload/avatars", body=form, headers={"Content-Type": content_type})

# An upload, stored by the avatars pipeline's output: (out/avatars, relative to the app).
status, _, body = upload(image("gradient:navy-orange", "300x200"))
stored = body.decode().split()
if status != 200 or len(stored) != 1 or not stored[0].startswith("out/avatars/"): fail(f"upload: {status} {body[:300]!r}")
size = subprocess.run(["identify", "-format", "%m %wx%h", stored[0]], check=True, capture_output=True, text=True).stdout
if size != "PNG 128x128": fail(f"the stored avatar is {size}")
refusals = [(lambda: upload(b"<html>not an image</html>"), (415, "not_an_image")),
            (lambda: request("POST", "/upload/avatars", body=b"hello", headers={"Content-Type": "text/plain"}), (415, "unsupported_media_type"))]
if args.upload == "raw":
    refusals.append((lambda: upload(b"", "image/png"), (400, "empty_upload")))
else:
    # A form without the file part, and a file part that is not an image's type.
    form, content_type = multipart([("note", None, "text/plain", b"no file here")])
    refusals.append((lambda: request("POST", "/upload/avatars", body=form, headers={"Content-Type": content_type}), (400, "missing_file")))
    refusals.append((lambda: upload(b"hello", "text/plain"), (415, "unsupported_media_type")))
for send, want in refusals:
    status, _, answer = send()
    try: kind = json.loads(answer)["title"]
    except Exception: fail(f"an upload refused with {status} and no problem+json: {answer[:200]!r}")
    if (status, kind) != want: fail(f"upload refused as {(status, kind)}, wanted {want}: {answer[:200]!r}")
# A 2 GB body is refused from its Content-Length, before it is read.
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
conn.putrequest("POST", "/upload/avatars")
conn.putheader("Content-Type", "image/jpeg" if args.upload == "raw" else "multipart/form-data; boundary=x")
conn.putheader("Content-Length", str(2 << 30))
conn.endheaders()
conn.send(b"\xff\xd8" * 1000)
response = conn.getresponse()
if response.status != 413 or json.loads(response.read())["title"] != "too_large": fail(f"a 2 GB upload: {response.status}")
conn.close()
written = [n for n in os.listdir("out/avatars") if not n.startswith(".")]
if len(written) != 1: fail(f"a refused upload wrote something: {written}")

# A client that goes away mid-request: a 36 MP image (a grey PNG, small enough for a URL) asked
# for, and the connection closed at once. With Hummingbird the work stops (499 in the access
# log); Vapor 4 tells a handler nothing, so there it runs to its end (200). Either way the app
# goes on serving. A different grey each time: nothing is cached or shared between attempts.
def access_log():
    with open(args.log) as f:
        return [json.loads(line) for line in f if line.startswith("{")]

for attempt in range(3):
    grey = subprocess.run(["convert", "-size", "6000x6000", f"xc:gray{40 + attempt}", "-depth", "8", "png:-"], check=True, capture_output=True).stdout
    slow = link("avatars", "data:image/png;base64," + base64.b64encode(grey).decode())
    before = len(access_log())
    client = socket.create_connection(("127.0.0.1", port), timeout=60)
    client.sendall(f"GET {slow} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    client.close()
    deadline = time.monotonic() + 120  # the line comes when the work stops or ends; generous for a loaded machine
    while time.monotonic() < deadline:
        lines = [l for l in access_log()[before:] if l.get("pipeline") == "avatars" and l.get("method") == "GET"]
        if lines: break
        time.sleep(0.1)
    else:
        fail("no access-log line for the request whose client went away")
    gone = lines[0]["status"]
    if args.disconnect == "completes":
        if gone != 200: fail(f"the request whose client went away ended with {gone}, wanted 200 (Vapor runs it to its end)")
        break
    if gone == 499: break
    # 200: the work was done before the close was seen; try again with another image.
else:
    fail(f"a client that went away: its work was never cancelled (last status {gone})")
status, _, _ = request("GET", "/livez")
if status != 200: fail(f"after a client went away, /livez answers {status}")

# One job and no queue: of 24 new images asked at once, some are refused with 429 and Retry-After.
sources = [link("avatars", "data:image/jpeg;base64," + base64.b64encode(image("plasma:", "400x300", quality=30 + i)).decode()) for i in range(24)]
for attempt in range(5):
    with concurrent.futures.ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(lambda p: request("GET", p), sources))
    busy = [h for s, h, _ in answers if s == 429]
    if busy: break
if not busy or any(h.get("retry-after") != "1" for h in busy): fail(f"no 429 with Retry-After among {[s for s, _, _ in answers]}")
if any(s not in (200, 429) for s, _, _ in answers): fail(f"answers under load: {[s for s, _, _ in answers]}")
if not any(l["status"] == 429 for l in access_log()): fail("no 429 in the access log")
print(f"example check: signed GET, 304, WebP by Accept, {args.upload} upload stored, {', '.join(str(w[0]) for _, w in refusals)} and 413 refused, "
      f"a client gone ({gone}), {len(busy)} of 24 refused with 429")