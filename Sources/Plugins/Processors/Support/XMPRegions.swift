import Foundation
import CXML2
import PipelineKit

/// A region read from XMP, before it is placed on an image: a box in fractions of the upright
/// picture's width and height (a point has no width or height).
struct NormalizedRegion: Sendable, Equatable {
    var x: Double, y: Double, width: Double, height: Double
    /// `face`, `pet`, `focus` or `barcode` (MWG), an IPTC region type's last word (`human`,
    /// `animal`...), or `region` when none is given.
    var kind: String
    var name: String?
    /// IPTC's role (`cropping`, `mainSubjectArea`...), when given.
    var role: String?
    /// `mwg` or `iptc`.
    var standard: String
}

/// Reads the regions people mark in an image's XMP packet: the Metadata Working Group's
/// `mwg-rs:Regions` (Lightroom, Picasa, digiKam, exiftool's `RegionInfo`) and IPTC's Image Regions
/// (`Iptc4xmpExt:ImageRegion`).
///
/// The packet is parsed as XML (libxml2's reader) into a small tree, then read as
/// RDF: a property may be an attribute or an element, a structure may be `rdf:parseType='Resource'`
/// or an `rdf:Description`, and a list is an `rdf:Bag`, `rdf:Seq` or `rdf:Alt`. Names are matched
/// by namespace URI, not by prefix. Nothing in the packet is fatal: a region that cannot be read,
/// or that lies outside the picture, is left out with a warning, and the packet's limits
/// (``maxBytes``, ``maxElements``, ``maxRegions``) bound the work whatever it holds. A packet with
/// a DTD is not read (XMP has none; entity expansion is a classic attack).
///
/// Boxes come out in the upright picture (its EXIF orientation applied). That is what MWG and
/// IPTC describe; MWG regions whose `AppliedToDimensions` are the stored picture's (a turned one,
/// EXIF 5-8, written by a tool that did not turn them) are turned here.
enum XMPRegions {
    static let maxBytes = 4 << 20
    static let maxElements = 200_000
    static let maxRegions = 256

    static let rdf = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
    static let mwg = "http://www.metadataworkinggroup.com/schemas/regions/"
    static let area = "http://ns.adobe.com/xmp/sType/Area#"
    static let dimensions = "http://ns.adobe.com/xap/1.0/sType/Dimensions#"
    static let iptc = "http://iptc.org/std/Iptc4xmpExt/2008-02-29/"
    static let xmp = "http://ns.adobe.com/xap/1.0/"

    /// Whether `xmp` may hold regions (a cheap look before parsing).
    static func mayHoldRegions(_ xmp: Data) -> Bool {
        xmp.range(of: Data(mwg.utf8)) != nil || xmp.range(of: Data(iptc.utf8)) != nil
    }

    /// The regions of `xmp`, in fractions of the upright picture, and what was wrong with them.
    /// `orientation` is the EXIF orientation of the stored picture, `stored` its stored size (for
    /// IPTC's pixel units and MWG's dimensions), when known.
    static func read(_ xmp: Data, orientation: Int, stored: PixelSize?) -> (regions: [NormalizedRegion], warnings: [String]) {
        guard xmp.count <= maxBytes else { return ([], ["the XMP packet is \(xmp.count) bytes, over \(maxBytes); its regions are not read"]) }
        if xmp.range(of: Data("<!DOCTYPE".utf8)) != nil || xmp.range(of: Data("<!ENTITY".utf8)) != nil {
            return ([], ["the XMP packet declares a DTD or entities, which XMP never has; its regions are not read"])
        }
        let tree = XMLTree.parse(xmp, maxElements: maxElements)
        guard let root = tree.root else { return ([], ["the XMP packet is not well-formed XML (\(tree.error ?? "unreadable")); its regions are not read"]) }
        var reading = Reading(orientation: orientation, stored: stored)
        for description in root.all(where: { $0.is(rdf, "Description") }) {
            if case .structure(let regions)? = RDF.field(description, mwg, "Regions") { reading.readMWG(regions) }
            if let list = RDF.field(description, iptc, "ImageRegion") { reading.readIPTC(list) }
        }
        if reading.total > maxRegions {
            reading.warnings.append("\(reading.total) regions; the first \(maxRegions) are used")
        }
        return (reading.regions, reading.warnings)
    }

    /// Regions and warnings as they are read, region by region.
    struct Reading {
        let orientation: Int
        let stored: PixelSize?
        var regions: [NormalizedRegion] = []
        var warnings: [String] = []
        /// Warnings beyond this many are counted, not listed.
        static let maxWarnings = 8
        var unlisted = 0
        /// Regions read whole, kept or not (only the first ``XMPRegions/maxRegions`` are kept).
        var total = 0

        /// The stored picture's size turned upright.
        var upright: PixelSize? {
            guard let stored else { return nil }
            return orientation >= 5 ? PixelSize(width: stored.height, height: stored.width) : stored
        }

        mutating func warn(_ text: String) {
            if warnings.count < Self.maxWarnings { warnings.append(text) } else {
                unlisted += 1
                let note = "and \(unlisted) more warnings"
                if warnings.count == Self.maxWarnings { warnings.append(note) } else { warnings[Self.maxWarnings] = note }
            }
        }

        mutating func readMWG(_ info: XMLTree.Node) {
            // Regions drawn on the stored picture of a turned one: turned here.
            var turned = false
            if orientation >= 5, let stored, case .structure(let applied)? = RDF.field(info, XMPRegions.mwg, "AppliedToDimensions"),
               let w = RDF.number(applied, XMPRegions.dimensions, "w"), let h = RDF.number(applied, XMPRegions.dimensions, "h"), w > 0, h > 0, stored.width != stored.height {
                turned = (w > h) == (stored.width > stored.height)
            }
            guard let list = RDF.field(info, XMPRegions.mwg, "RegionList") else { return }
            for (index, item) in list.items.enumerated() {
                let label = "MWG region \(index + 1)"
                guard case .structure(let region) = item, case .structure(let area)? = RDF.field(region, XMPRegions.mwg, "Area") else {
                    warn("\(label): no Area"); continue
                }
                let unit = RDF.text(area, XMPRegions.area, "unit") ?? "normalized"
                guard unit == "normalized" else { warn("\(label): unit '\(unit.prefix(40))', not 'normalized'"); continue }
                guard let cx = RDF.number(area, XMPRegions.area, "x"), let cy = RDF.number(area, XMPRegions.area, "y") else {
                    warn("\(label): its Area has no x and y"); continue
                }
                let diameter = RDF.number(area, XMPRegions.area, "d")
                let w = RDF.number(area, XMPRegions.area, "w") ?? diameter ?? 0
                let h = RDF.number(area, XMPRegions.area, "h") ?? diameter ?? 0
                // MWG gives the centre.
                var box = (x: cx - w / 2, y: cy - h / 2, width: w, height: h)
                if turned { box = Orientation.upright(box, orientation) }
                let kind = (RDF.text(region, XMPRegions.mwg, "Type") ?? "region").lowercased()
                add(box, label: label, NormalizedRegion(x: 0, y: 0, width: 0, height: 0, kind: String(kind.prefix(40)),
                                                        name: RDF.text(region, XMPRegions.mwg, "Name").map { String($0.prefix(200)) },
                                                        role: nil, standard: "mwg"))
            }
        }

        mutating func readIPTC(_ list: RDF.Value) {
            for (index, item) in list.items.enumerated() {
                let label = "IPTC region \(index + 1)"
                guard case .structure(let region) = item, case .structure(let boundary)? = RDF.field(region, XMPRegions.iptc, "RegionBoundary") else {
                    warn("\(label): no RegionBoundary"); continue
                }
                guard let box = iptcBox(boundary, label: label) else { continue }
                let kind = RDF.field(region, XMPRegions.iptc, "rCtype").flatMap(Self.entity) ?? "region"
                let role = RDF.field(region, XMPRegions.iptc, "rRole").flatMap(Self.entity)
                add(box, label: label, NormalizedRegion(x: 0, y: 0, width: 0, height: 0, kind: kind,
                                                        name: RDF.field(region, XMPRegions.iptc, "Name")?.firstText.map { String($0.prefix(200)) },
                                                        role: role, standard: "iptc"))
            }
        }

        /// An IPTC boundary as fractions of the picture: a rectangle (top-left corner), a circle
        /// (centre and radius, the radius in the width's unit) or a polygon (its bounding box).
        mutating func iptcBox(_ boundary: XMLTree.Node, label: String) -> (x: Double, y: Double, width: Double, height: Double)? {
            let unit = RDF.text(boundary, XMPRegions.iptc, "rbUnit") ?? "relative"
            let scale: (x: Double, y: Double)
            switch unit {
            case "relative": scale = (1, 1)
            case "pixel":
                guard let upright, upright.width > 0, upright.height > 0 else { warn("\(label): in pixels, of a picture of unknown size"); return nil }
                scale = (1 / Double(upright.width), 1 / Double(upright.height))
            default: warn("\(label): unit '\(unit.prefix(40))', not 'relative' or 'pixel'"); return nil
            }
            let shape = RDF.text(boundary, XMPRegions.iptc, "rbShape") ?? "rectangle"
            let x = RDF.number(boundary, XMPRegions.iptc, "rbX"), y = RDF.number(boundary, XMPRegions.iptc, "rbY")
            switch shape {
            case "rectangle":
                guard let x, let y, let w = RDF.number(boundary, XMPRegions.iptc, "rbW"), let h = RDF.number(boundary, XMPRegions.iptc, "rbH") else {
                    warn("\(label): a rectangle needs rbX, rbY, rbW and rbH"); return nil
                }
                return (x * scale.x, y * scale.y, w * scale.x, h * scale.y)
            case "circle":
                guard let x, let y, let r = RDF.number(boundary, XMPRegions.iptc, "rbRx") else { warn("\(label): a circle needs rbX, rbY and rbRx"); return nil }
                // The radius is in the width's unit.
                let rx: Double = r * scale.x
                var ry: Double = rx
                if let upright { ry = rx * Double(upright.width) / Double(max(1, upright.height)) }
                let left: Double = x * scale.x - rx, top: Double = y * scale.y - ry
                return (left, top, 2 * rx, 2 * ry)
            case "polygon":
                let points = (RDF.field(boundary, XMPRegions.iptc, "rbVertices")?.items ?? []).compactMap { vertex -> (Double, Double)? in
                    guard case .structure(let v) = vertex, let px = RDF.number(v, XMPRegions.iptc, "rbX"), let py = RDF.number(v, XMPRegions.iptc, "rbY") else { return nil }
                    return (px * scale.x, py * scale.y)
                }
                guard points.count >= 3 else { warn("\(label): a polygon needs three vertices"); return nil }
                let xs = points.map(\.0), ys = points.map(\.1)
                return (xs.min()!, ys.min()!, xs.max()! - xs.min()!, ys.max()! - ys.min()!)
            default:
                warn("\(label): shape '\(shape.prefix(40))' is not rectangle, circle or polygon"); return nil
            }
        }

        /// An IPTC entity's kind: the last word of its first identifier (a NewsCodes URI), or its name.
        static func entity(_ value: RDF.Value) -> String? {
            for item in value.items {
                guard case .structure(let entity) = item else { continue }
                if let id = RDF.field(entity, XMPRegions.xmp, "Identifier")?.firstText,
                   let word = id.split(separator: "/").last.map(String.init), !word.isEmpty {
                    return String(word.prefix(40)).lowercased()
                }
                if let name = RDF.field(entity, XMPRegions.iptc, "Name")?.firstText { return String(name.prefix(40)).lowercased() }
            }
            return nil
        }

        /// Adds a region whose box is checked: finite, of no negative size, and at least partly
        /// inside the picture (then clipped to it).
        mutating func add(_ box: (x: Double, y: Double, width: Double, height: Double), label: String, _ region: NormalizedRegion) {
            let values = [box.x, box.y, box.width, box.height]
            guard values.allSatisfy(\.isFinite), box.width >= 0, box.height >= 0 else {
                warn("\(label): its box is not a box (\(values.map { String(format: "%g", $0) }.joined(separator: ", ")))"); return
            }
            let left = max(0, box.x), top = max(0, box.y)
            let right = min(1, box.x + box.width), bottom = min(1, box.y + box.height)
            guard right >= left, bottom >= top, box.x <= 1, box.y <= 1 else {
                warn("\(label): outside the picture (x \(String(format: "%g", box.x)), y \(String(format: "%g", box.y)))"); return
            }
            total += 1
            guard regions.count < XMPRegions.maxRegions else { return }
            var region = region
            (region.x, region.y, region.width, region.height) = (left, top, right - left, bottom - top)
            regions.append(region)
        }
    }
}

/// EXIF orientations as maps of boxes in fractions of a picture.
enum Orientation {
    /// Where a point of the stored picture lands in the upright one (EXIF orientation 1-8).
    static func upright(_ point: (Double, Double), _ orientation: Int) -> (Double, Double) {
        let (u, v) = point
        switch orientation {
        case 2: return (1 - u, v)
        case 3: return (1 - u, 1 - v)
        case 4: return (u, 1 - v)
        case 5: return (v, u)
        case 6: return (1 - v, u)
        case 7: return (1 - v, 1 - u)
        case 8: return (v, 1 - u)
        default: return (u, v)
        }
    }

    /// The inverse: where a point of the upright picture is in the stored one.
    static func stored(_ point: (Double, Double), _ orientation: Int) -> (Double, Double) {
        upright(point, orientation == 6 ? 8 : orientation == 8 ? 6 : orientation)
    }

    static func upright(_ box: (x: Double, y: Double, width: Double, height: Double), _ orientation: Int)
        -> (x: Double, y: Double, width: Double, height: Double) {
        map(box) { upright($0, orientation) }
    }

    static func stored(_ box: (x: Double, y: Double, width: Double, height: Double), _ orientation: Int)
        -> (x: Double, y: Double, width: Double, height: Double) {
        map(box) { stored($0, orientation) }
    }

    private static func map(_ box: (x: Double, y: Double, width: Double, height: Double), _ f: ((Double, Double)) -> (Double, Double))
        -> (x: Double, y: Double, width: Double, height: Double) {
        let a = f((box.x, box.y)), b = f((box.x + box.width, box.y + box.height))
        return (min(a.0, b.0), min(a.1, b.1), abs(a.0 - b.0), abs(a.1 - b.1))
    }
}

/// RDF as XMP writes it, read from an ``XMLTree``.
enum RDF {
    /// A property's value: text, a structure (the node whose attributes and children are its
    /// fields), or a list.
    enum Value {
        case text(String)
        case structure(XMLTree.Node)
        case list([Value])

        /// A list's items; a single value is a list of one.
        var items: [Value] {
            if case .list(let items) = self { return items }
            return [self]
        }

        /// The first text in it (a language alternative's default, a bag's first item).
        var firstText: String? {
            switch self {
            case .text(let text): return text.isEmpty ? nil : text
            case .list(let items): return items.lazy.compactMap(\.firstText).first
            case .structure: return nil
            }
        }
    }

    /// The value of property `namespace`:`name` of a structure (an attribute, or a child element).
    static func field(_ node: XMLTree.Node, _ namespace: String, _ name: String) -> Value? {
        if let attribute = node.attributes.first(where: { $0.namespace == namespace && $0.name == name }) {
            return .text(attribute.value.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        return node.children.first { $0.is(namespace, name) }.map(value)
    }

    static func text(_ node: XMLTree.Node, _ namespace: String, _ name: String) -> String? {
        field(node, namespace, name)?.firstText
    }

    static func number(_ node: XMLTree.Node, _ namespace: String, _ name: String) -> Double? {
        text(node, namespace, name).flatMap { Double($0) }
    }

    /// What an element holds, as RDF reads it.
    static func value(_ element: XMLTree.Node) -> Value {
        if element.attribute(rdfNamespace, "parseType") == "Resource" { return .structure(element) }
        if let container = element.children.first(where: { $0.namespace == rdfNamespace && ["Bag", "Seq", "Alt"].contains($0.name) }) {
            return .list(container.children.filter { $0.is(rdfNamespace, "li") }.map(value))
        }
        if let description = element.children.first(where: { $0.is(rdfNamespace, "Description") }) { return .structure(description) }
        // The short form of a structure (its fields as attributes of the property's element), or
        // fields as child elements without the parseType that should say so: read as a structure.
        if !element.children.isEmpty || element.attributes.contains(where: { $0.namespace != rdfNamespace && $0.namespace != XMLTree.xmlNamespace }) {
            return .structure(element)
        }
        return .text(element.text.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    static let rdfNamespace = XMPRegions.rdf
}

/// A small XML tree with resolved namespaces, from libxml2's reader (`xmlTextReader`), with a cap
/// on the elements it holds. No network, no DTD loaded, no entity substituted, nothing printed:
/// errors come back as text.
final class XMLTree {
    static let xmlNamespace = "http://www.w3.org/XML/1998/namespace"
    static let xmlnsNamespace = "http://www.w3.org/2000/xmlns/"

    struct Attribute {
        let namespace: String, name: String, value: String
    }

    final class Node {
        let namespace: String, name: String
        let attributes: [Attribute]
        var children: [Node] = []
        var text = ""

        init(namespace: String, name: String, attributes: [Attribute]) {
            self.namespace = namespace
            self.name = name
            self.attributes = attributes
        }

        func `is`(_ namespace: String, _ name: String) -> Bool { self.namespace == namespace && self.name == name }

        func attribute(_ namespace: String, _ name: String) -> String? {
            attributes.first { $0.namespace == namespace && $0.name == name }?.value
        }

        /// Every node of the tree from here, depth first, that `matches` (without recursion).
        func all(where matches: (Node) -> Bool) -> [Node] {
            var found: [Node] = [], stack = [self]
            while let node = stack.popLast() {
                if matches(node) { found.append(node) }
                stack += node.children.reversed()
            }
            return found
        }
    }

    /// libxml2 is set up once per process before any thread parses.
    private static let initialized: Void = xmlInitParser()

    /// The tree of `data`, or what was wrong with it.
    static func parse(_ data: Data, maxElements: Int) -> (root: Node?, error: String?) {
        _ = initialized
        let options = Int32(XML_PARSE_NONET.rawValue | XML_PARSE_NOERROR.rawValue | XML_PARSE_NOWARNING.rawValue | XML_PARSE_NOCDATA.rawValue)
        let made = data.withUnsafeBytes { bytes -> OpaquePointer? in
            guard let base = bytes.baseAddress, bytes.count < Int(Int32.max) else { return nil }
            return xmlReaderForMemory(base.assumingMemoryBound(to: CChar.self), Int32(bytes.count), nil, nil, options)
        }
        // The reader reads from the bytes it was given: they live until it is freed, below.
        guard let reader = made else { return (nil, "libxml2 could not start reading") }
        defer { xmlFreeTextReader(reader) }
        xmlResetLastError()
        var root: Node?, stack: [Node] = [], elements = 0
        func text(_ pointer: UnsafePointer<xmlChar>?) -> String { pointer.map { String(cString: $0) } ?? "" }
        while true {
            let step = xmlTextReaderRead(reader)
            if step == 0 { break }
            guard step == 1 else { return (nil, lastError(reader)) }
            switch Int(xmlTextReaderNodeType(reader)) {
            case Int(XML_READER_TYPE_ELEMENT.rawValue):
                elements += 1
                guard elements <= maxElements else { return (nil, "more than \(maxElements) elements") }
                let empty = xmlTextReaderIsEmptyElement(reader) == 1
                var attributes: [Attribute] = []
                while xmlTextReaderMoveToNextAttribute(reader) == 1 {
                    let namespace = text(xmlTextReaderConstNamespaceUri(reader))
                    guard namespace != xmlnsNamespace else { continue }
                    attributes.append(Attribute(namespace: namespace, name: text(xmlTextReaderConstLocalName(reader)),
                                                value: text(xmlTextReaderConstValue(reader))))
                }
                _ = xmlTextReaderMoveToElement(reader)
                let node = Node(namespace: text(xmlTextReaderConstNamespaceUri(reader)), name: text(xmlTextReaderConstLocalName(reader)),
                                attributes: attributes)
                if let parent = stack.last { parent.children.append(node) } else if root == nil { root = node }
                if !empty { stack.append(node) }
            case Int(XML_READER_TYPE_END_ELEMENT.rawValue):
                _ = stack.popLast()
            case Int(XML_READER_TYPE_TEXT.rawValue), Int(XML_READER_TYPE_SIGNIFICANT_WHITESPACE.rawValue):
                // Text only matters in leaves; a cap keeps a huge text node from growing without bound.
                if let node = stack.last, node.text.utf8.count < 4096 { node.text += text(xmlTextReaderConstValue(reader)) }
            default:
                break
            }
        }
        guard let root else { return (nil, "no element") }
        return (root, nil)
    }

    /// libxml2's message for the error that stopped `reader`, with its place.
    private static func lastError(_ reader: OpaquePointer) -> String {
        guard let error = xmlGetLastError() else { return "libxml2 stopped without saying why" }
        let message = error.pointee.message.map { String(cString: $0).trimmingCharacters(in: .whitespacesAndNewlines) } ?? "error \(error.pointee.code)"
        return "line \(error.pointee.line), column \(error.pointee.int2): \(message.prefix(200))"
    }
}
