import Foundation

/// A self-contained HTML contact sheet of a run: the summary, then one tile per item (the output
/// image, or the failure's kind and message), with filters by status and failure kind. No
/// resources of its own; local images are linked relative to the sheet (so it works beside the
/// outputs), objects by their URL.
public enum ContactSheet {
    /// - Parameters:
    ///   - links: the address of each item's first output, by position in `report.items`
    ///     (`nil`: no picture to show).
    public static func html(_ report: RunReport, links: [String?]) -> String {
        let kinds = Set(report.items.compactMap { $0.error?.kind.rawValue }).sorted()
        var tiles = ""
        for (index, item) in report.items.enumerated() {
            tiles += tile(item, link: index < links.count ? links[index] : nil)
        }
        let head = """
            <!doctype html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>\(escape(report.pipeline)) — contact sheet</title>

            """
        let body = """
            </head>
            <body>

            """
        let main = """
            <main id="tiles">
            \(tiles)</main>

            """
        let end = """
            </body>
            </html>

            """
        return head + style + body + header(report) + nav(kinds) + main + script + end
    }

    /// The run's figures at the top: counts, wall time, rate, bytes.
    static func header(_ report: RunReport) -> String {
        let summary = report.summary
        let rate = summary.wallSeconds > 0 ? Double(summary.total) / summary.wallSeconds : 0
        return """
            <header>
            <h1>\(escape(report.pipeline)) — \(summary.total) items</h1>
            <div class="stats">
            <div class="stat"><b>\(summary.ok)</b><span>ok</span></div>
            <div class="stat"><b>\(summary.kept)</b><span>kept</span></div>
            <div class="stat\(summary.failed > 0 ? " bad" : "")"><b>\(summary.failed)</b><span>failed</span></div>
            <div class="stat"><b>\(summary.skipped)</b><span>skipped</span></div>
            <div class="stat"><b>\(String(format: "%.2f", summary.wallSeconds))s</b><span>wall time</span></div>
            <div class="stat"><b>\(String(format: "%.1f", rate))</b><span>items/s</span></div>
            <div class="stat"><b>\(escape(SummaryText.bytes(summary.bytesIn)))</b><span>bytes in</span></div>
            <div class="stat"><b>\(escape(SummaryText.bytes(summary.bytesOut)))</b><span>bytes out</span></div>
            </div>
            </header>

            """
    }

    /// The filters: by status, by failure kind (`kinds`), by source text.
    static func nav(_ kinds: [String]) -> String {
        let kindOptions = kinds.map { "<option value=\"\(escape($0))\">\(escape($0))</option>" }.joined()
        return """
            <nav>
            <button data-status="all" class="on">All</button>
            <button data-status="ok">ok</button>
            <button data-status="kept">kept</button>
            <button data-status="failed">failed</button>
            <button data-status="skipped">skipped</button>
            <select id="kind"><option value="">every failure kind</option>\(kindOptions)</select>
            <input id="search" type="search" placeholder="filter by source">
            <span id="count"></span>
            </nav>

            """
    }

    /// The sheet's styles (no resources of its own).
    static let style = """
        <style>
        :root { --bg: #f4f5f7; --card: #fff; --ink: #1f2328; --muted: #656d76; --line: #d8dee4; --bad: #cf222e; --ok: #1a7f37; }
        * { box-sizing: border-box; }
        body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; background: var(--bg); color: var(--ink); }
        header { background: #24292f; color: #fff; padding: 20px 28px; }
        header h1 { margin: 0 0 12px; font-size: 20px; font-weight: 600; }
        .stats { display: flex; flex-wrap: wrap; gap: 10px; }
        .stat { background: rgba(255,255,255,.08); border-radius: 8px; padding: 8px 14px; min-width: 110px; }
        .stat b { display: block; font-size: 18px; }
        .stat span { color: #afb8c1; font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
        .stat.bad b { color: #ff8182; }
        nav { position: sticky; top: 0; z-index: 1; display: flex; flex-wrap: wrap; gap: 8px; align-items: center;
              padding: 12px 28px; background: var(--bg); border-bottom: 1px solid var(--line); }
        nav button, nav select, nav input { font: inherit; padding: 6px 12px; border: 1px solid var(--line); border-radius: 6px; background: var(--card); }
        nav button.on { background: #24292f; color: #fff; border-color: #24292f; }
        nav input { flex: 1; min-width: 180px; }
        #count { color: var(--muted); }
        main { display: grid; grid-template-columns: repeat(auto-fill, minmax(210px, 1fr)); gap: 16px; padding: 20px 28px 40px; }
        .tile { background: var(--card); border: 1px solid var(--line); border-radius: 10px; overflow: hidden; display: flex; flex-direction: column; }
        .tile .pic { height: 190px; display: flex; align-items: center; justify-content: center;
                     background: repeating-conic-gradient(#eef0f2 0% 25%, #fff 0% 50%) 50% / 16px 16px; }
        .tile img { max-width: 100%; max-height: 190px; display: block; }
        .tile .meta { padding: 10px 12px; border-top: 1px solid var(--line); }
        .tile .src { font-weight: 600; white-space: nowrap; display: flex; min-width: 0; }
        .tile .src .dir { overflow: hidden; text-overflow: ellipsis; flex-shrink: 1; min-width: 1ch; color: var(--muted, #57606a); }
        .tile .src .name { overflow: hidden; text-overflow: ellipsis; flex-shrink: 0; max-width: 100%; }
        .tile .facts, .tile .times { color: var(--muted); font-size: 12px; }
        .tile.failed { border-color: var(--bad); }
        .tile.failed .pic { background: #fff1f0; flex-direction: column; gap: 8px; padding: 14px; text-align: center; }
        .badge { display: inline-block; background: var(--bad); color: #fff; border-radius: 999px; padding: 2px 10px; font-size: 12px; font-weight: 600; }
        .tile.failed .msg { color: #82071e; font-size: 12px; overflow-wrap: anywhere; max-height: 110px; overflow: hidden; }
        .tile.skipped { opacity: .7; }
        .hidden { display: none; }
        </style>

        """

    /// The filters' script.
    static let script = """
        <script>
        (function () {
          var status = "all", kind = "", text = "";
          var tiles = Array.prototype.slice.call(document.querySelectorAll(".tile"));
          function apply() {
            var shown = 0;
            tiles.forEach(function (t) {
              var show = (status === "all" || t.dataset.status === status)
                && (kind === "" || t.dataset.kind === kind)
                && (text === "" || t.dataset.source.toLowerCase().indexOf(text) >= 0);
              t.classList.toggle("hidden", !show);
              if (show) { shown++; }
            });
            document.getElementById("count").textContent = shown + " of " + tiles.length + " shown";
          }
          document.querySelectorAll("nav button").forEach(function (b) {
            b.addEventListener("click", function () {
              status = b.dataset.status;
              document.querySelectorAll("nav button").forEach(function (o) { o.classList.toggle("on", o === b); });
              apply();
            });
          });
          document.getElementById("kind").addEventListener("change", function (e) { kind = e.target.value; apply(); });
          document.getElementById("search").addEventListener("input", function (e) { text = e.target.value.toLowerCase(); apply(); });
          apply();
          document.body.dataset.ready = "yes";
        })();
        </script>

        """

    static func tile(_ item: ItemResult, link: String?) -> String {
        let t = item.timings
        let times = "load \(ms(t.load)) · decode \(ms(t.decode)) · process \(ms(t.process)) · encode \(ms(t.encode)) ms"
        let source = escape(item.source)
        if item.status == .failed, let error = item.error {
            return """
                <div class="tile failed" data-status="failed" data-kind="\(escape(error.kind.rawValue))" data-source="\(source)" title="\(source)">
                <div class="pic"><span class="badge">\(escape(error.kind.rawValue))</span><div class="msg">\(escape(error.stage.rawValue))\(error.plugin.map { " (\(escape($0)))" } ?? ""): \(escape(error.message))</div></div>
                <div class="meta">\(sourceLabel(item.source))<div class="facts">line \(item.index)</div></div>
                </div>

                """
        }
        let image = link.map { "<img loading=\"lazy\" src=\"\(escape($0))\" alt=\"\(source)\">" } ?? ""
        let size = item.width.flatMap { w in item.height.map { "\(w)×\($0)" } } ?? ""
        let facts = [size, SummaryText.bytes(item.bytesOut), item.outputs.count > 1 ? "\(item.outputs.count) outputs" : "",
                     item.degraded.map { "degraded: \($0)" } ?? "", item.fallback ? "fallback image" : "",
                     item.alternative.map { "from \($0)" } ?? ""]
            .filter { !$0.isEmpty }.joined(separator: " · ")
        // The placeholder colour (from `analyze`) behind the picture while it loads.
        var placeholder = ""
        if let colour = item.facts["dominant_color"]?.string, colour.range(of: "^#[0-9a-f]{6}$", options: .regularExpression) != nil {
            placeholder = " style=\"background:\(colour)\" data-placeholder=\"\(colour)\""
        }
        return """
            <div class="tile \(item.status.rawValue)" data-status="\(item.status.rawValue)" data-kind="" data-source="\(source)" title="\(source)\n\(escape(times))">
            <div class="pic"\(placeholder)>\(image)</div>
            <div class="meta">\(sourceLabel(item.source))<div class="facts">\(escape(facts))</div><div class="times">\(escape(times))</div></div>
            </div>

            """
    }

    /// The address of each item's first output from a page at `page`, by position in `items`
    /// (`nil`: no picture): a local output relative to the page's folder (a relative one resolved
    /// against its run's working directory, else `cwd`); a stored one by what `stored` gives for
    /// its destination and its key under it, by default its HTTP URL as the run addressed the
    /// store (``RunHeader/outputURL``).
    public static func links(_ items: [ItemResult], headers: [RunHeader?], page: URL, cwd: URL,
                             stored: ((_ dir: String, _ key: String) throws -> String?)? = nil) throws -> [String?] {
        var links: [String?] = []
        for (index, item) in items.enumerated() {
            guard let output = item.outputs.first else { links.append(nil); continue }
            let header = index < headers.count ? headers[index] : nil
            guard Source.urlScheme(of: output) != nil else {
                let base = header?.workingDirectory.map { URL(fileURLWithPath: $0) } ?? cwd
                let absolute = output.hasPrefix("/") ? URL(fileURLWithPath: output) : base.appendingPathComponent(output)
                links.append(relative(absolute, to: page.deletingLastPathComponent()))
                continue
            }
            guard let dir = header?.output, output.hasPrefix(dir) else { links.append(nil); continue }
            let key = String(String(output.dropFirst(dir.count)).drop { $0 == "/" })
            if let stored {
                links.append(try stored(dir, key))
            } else if let base = header?.outputURL {
                let path = key.split(separator: "/", omittingEmptySubsequences: false).map {
                    String($0).addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))) ?? String($0)
                }.joined(separator: "/")
                links.append((base.hasSuffix("/") ? base : base + "/") + path)
            } else {
                links.append(nil)
            }
        }
        return links
    }

    /// `target`'s path relative to `directory`, percent-encoded for an `src` attribute.
    public static func relative(_ target: URL, to directory: URL) -> String {
        let from = directory.standardizedFileURL.pathComponents, to = target.standardizedFileURL.pathComponents
        var common = 0
        while common < min(from.count, to.count), from[common] == to[common] { common += 1 }
        let parts = Array(repeating: "..", count: from.count - common) + to[common...]
        return parts.map { $0.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))) ?? $0 }
            .joined(separator: "/")
    }

    static func ms(_ value: Double) -> String { value >= 100 ? String(format: "%.0f", value) : String(format: "%.1f", value) }

    /// A card's source: the directory part shrinks (cut with an ellipsis) before the file name,
    /// so long paths that share a prefix still show what tells them apart.
    static func sourceLabel(_ source: String) -> String {
        let cut = source.lastIndex(of: "/").map { source.index(after: $0) } ?? source.startIndex
        let (directory, name) = cut == source.endIndex ? ("", source) : (String(source[..<cut]), String(source[cut...]))
        return "<div class=\"src\"><span class=\"dir\">\(escape(directory))</span><span class=\"name\">\(escape(name))</span></div>"
    }

    static func escape(_ text: String) -> String {
        var out = ""
        for c in text {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(c)
            }
        }
        return out
    }
}
