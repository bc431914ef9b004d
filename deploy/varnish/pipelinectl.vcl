vcl 4.1;
# Varnish 7 in front of `pipelinectl serve`, purged by `pipelinectl cache purge` through the
# `varnish` purger (docs/serve.md, "Behind a CDN"). Needs varnish-modules for xkey (Debian:
# `apt-get install varnish varnish-modules`). The tests run this file with the backend's port
# replaced.

import std;
import xkey;

backend serve {
    .host = "127.0.0.1";
    .port = "8080";
}

# Who may purge: the hosts that run `pipelinectl cache purge` (or `work`).
acl purgers {
    "127.0.0.1";
    "::1";
}

sub vcl_recv {
    if (req.method == "PURGE" || req.method == "BAN") {
        if (client.ip !~ purgers) {
            return (synth(405, "Not allowed"));
        }
        if (!req.http.xkey-purge) {
            return (synth(403, "No tags in xkey-purge"));
        }
        if (req.method == "PURGE") {
            # mode: xkey. Every object tagged with one of the space-separated tags.
            set req.http.n-gone = xkey.purge(req.http.xkey-purge);
            return (synth(200, "Invalidated " + req.http.n-gone + " objects"));
        }
        # mode: ban (no vmod needed). Every object whose Surrogate-Key holds one of the tags
        # (the expression holds no space: a ban's argument ends at one).
        if (std.ban("obj.http.Surrogate-Key ~ (^|[[:space:]])(" + regsuball(regsuball(req.http.xkey-purge, "\.", "[.]"), " +", "|")
                    + ")([[:space:]]|$)")) {
            return (synth(200, "Banned"));
        }
        return (synth(400, "Ban refused: " + std.ban_error()));
    }
}

sub vcl_backend_response {
    # xkey indexes the `xkey` header; serve's answers name their tags in Surrogate-Key.
    set beresp.http.xkey = beresp.http.Surrogate-Key;
}

sub vcl_deliver {
    unset resp.http.xkey;
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}

sub vcl_synth {
    if (resp.reason ~ "^(Invalidated|Banned)") {
        set resp.http.Content-Type = "text/plain";
        synthetic(resp.reason);
        return (deliver);
    }
}
