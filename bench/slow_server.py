#!/usr/bin/env python3
"""A loopback HTTP/1.1 server for benchmarks: waits DELAY_MS before each response, with keep-alive.
Serves one file for every path, or, given a directory, the file named by the path (query strings
ignored; files are read once and kept in memory). Built on asyncio so that thousands of waiting
requests cost no threads: the threaded http.server topped out near 170 requests/s here, which made
it, not the client, the bottleneck. Prints its port on the first line, then serves until killed.
Usage: slow_server.py FILE|DIR [DELAY_MS]"""
import asyncio
import mimetypes
import os
import sys

root = sys.argv[1]
delay = (float(sys.argv[2]) if len(sys.argv) > 2 else 50.0) / 1000.0


def response(path):
    body = open(path, "rb").read()
    kind = mimetypes.guess_type(path)[0] or "application/octet-stream"
    return (b"HTTP/1.1 200 OK\r\nContent-Type: " + kind.encode() + b"\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


if os.path.isdir(root):
    files = {"/" + name: response(os.path.join(root, name)) for name in os.listdir(root)
             if os.path.isfile(os.path.join(root, name)) and not name.startswith(".")}
    single = None
else:
    files = {}
    single = response(root)
missing = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


async def handle(reader, writer):
    try:
        while True:
            request = await reader.readuntil(b"\r\n\r\n")
            if not request:
                break
            target = request.split(b" ", 2)[1].decode("latin-1").split("?", 1)[0]
            await asyncio.sleep(delay)
            writer.write(single if single is not None else files.get(target, missing))
            await writer.drain()
            if b"connection: close" in request.lower():
                break
    except (asyncio.IncompleteReadError, ConnectionError, IndexError):
        pass
    finally:
        writer.close()


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
