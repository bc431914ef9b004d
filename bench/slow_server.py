#!/usr/bin/env python3
"""A loopback HTTP/1.1 server for benchmarks: waits DELAY_MS before each response and serves one
file for every path (query strings ignored), with keep-alive. Built on asyncio so that thousands of
waiting requests cost no threads: the threaded http.server topped out near 170 requests/s here,
which made it, not the client, the bottleneck. Prints its port on the first line, then serves
until killed. Usage: slow_server.py FILE [DELAY_MS]"""
import asyncio
import sys

body = open(sys.argv[1], "rb").read()
delay = (float(sys.argv[2]) if len(sys.argv) > 2 else 50.0) / 1000.0
head = (b"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: "
        + str(len(body)).encode() + b"\r\n\r\n")


async def handle(reader, writer):
    try:
        while True:
            request = await reader.readuntil(b"\r\n\r\n")
            if not request:
                break
            await asyncio.sleep(delay)
            writer.write(head + body)
            await writer.drain()
            if b"connection: close" in request.lower():
                break
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=512)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
