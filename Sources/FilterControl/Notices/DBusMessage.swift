/// The few D-Bus wire-protocol pieces a desktop notice needs: building a
/// method call (little endian, protocol version 1) and reading the header
/// and simple bodies of what the bus sends back. No Swift D-Bus package is
/// available; this follows the D-Bus specification's "Message Protocol".
public struct DBusMessage: Sendable, Hashable {
    public enum MessageType: UInt8, Sendable {
        case methodCall = 1, methodReturn = 2, error = 3, signal = 4
    }

    /// A value of the types a notice uses.
    public indirect enum Value: Sendable, Hashable {
        case byte(UInt8)
        case boolean(Bool)
        case int32(Int32)
        case uint32(UInt32)
        case string(String)
        case objectPath(String)
        case signature(String)
        case variant(Value)
        /// An array of one element type (its signature given, for an empty array).
        case array(elementSignature: String, [Value])
        case dictEntry(Value, Value)
        case structure([Value])

        public var signature: String {
            switch self {
            case .byte: "y"
            case .boolean: "b"
            case .int32: "i"
            case .uint32: "u"
            case .string: "s"
            case .objectPath: "o"
            case .signature: "g"
            case .variant: "v"
            case .array(let element, _): "a" + element
            case .dictEntry(let key, let value): "{" + key.signature + value.signature + "}"
            case .structure(let fields): "(" + fields.map(\.signature).joined() + ")"
            }
        }
    }

    public var type: MessageType
    public var serial: UInt32
    public var path: String?
    public var interface: String?
    public var member: String?
    public var errorName: String?
    public var replySerial: UInt32?
    public var destination: String?
    public var sender: String?
    public var body: [Value]

    public init(
        type: MessageType = .methodCall, serial: UInt32, path: String? = nil, interface: String? = nil, member: String? = nil,
        errorName: String? = nil, replySerial: UInt32? = nil, destination: String? = nil, sender: String? = nil, body: [Value] = []
    ) {
        self.type = type
        self.serial = serial
        self.path = path
        self.interface = interface
        self.member = member
        self.errorName = errorName
        self.replySerial = replySerial
        self.destination = destination
        self.sender = sender
        self.body = body
    }

    public var bodySignature: String { body.map(\.signature).joined() }

    // MARK: Writing

    public func encoded() -> [UInt8] {
        var bodyWriter = DBusWriter()
        for value in body { bodyWriter.write(value) }
        var fields: [Value] = []
        func field(_ code: UInt8, _ value: Value?) {
            if let value { fields.append(.structure([.byte(code), .variant(value)])) }
        }
        field(1, path.map(Value.objectPath))
        field(2, interface.map(Value.string))
        field(3, member.map(Value.string))
        field(4, errorName.map(Value.string))
        field(5, replySerial.map(Value.uint32))
        field(6, destination.map(Value.string))
        field(7, sender.map(Value.string))
        field(8, body.isEmpty ? nil : .signature(bodySignature))
        var header = DBusWriter()
        header.write(.byte(UInt8(ascii: "l")))
        header.write(.byte(type.rawValue))
        header.write(.byte(0))  // flags
        header.write(.byte(1))  // protocol version
        header.write(.uint32(UInt32(bodyWriter.bytes.count)))
        header.write(.uint32(serial))
        header.write(.array(elementSignature: "(yv)", fields))
        header.pad(to: 8)
        return header.bytes + bodyWriter.bytes
    }

    // MARK: Reading

    public struct ParseError: Error, Sendable, Hashable, CustomStringConvertible {
        public var description: String
    }

    /// The length of the whole message that starts `bytes`, once its fixed header (16 bytes) is there.
    public static func messageLength(_ bytes: ArraySlice<UInt8>) throws(ParseError) -> Int? {
        guard bytes.count >= 16 else { return nil }
        let base = bytes.startIndex
        guard bytes[base] == UInt8(ascii: "l") else { throw ParseError(description: "big-endian messages are not read") }
        func u32(_ at: Int) -> Int { Int(bytes[base + at]) | Int(bytes[base + at + 1]) << 8 | Int(bytes[base + at + 2]) << 16 | Int(bytes[base + at + 3]) << 24 }
        let bodyLength = u32(4)
        let fieldsLength = u32(12)
        guard bodyLength < 1 << 26, fieldsLength < 1 << 26 else { throw ParseError(description: "message too long") }
        let headerLength = 16 + fieldsLength
        return (headerLength + 7) / 8 * 8 + bodyLength
    }

    /// Reads a whole little-endian message: its header fields and a body of
    /// basic types, strings, and arrays of them (what replies and errors carry).
    public init(decoding bytes: [UInt8]) throws(ParseError) {
        var reader = DBusReader(bytes: bytes)
        guard try reader.byte() == UInt8(ascii: "l") else { throw ParseError(description: "big-endian messages are not read") }
        guard let type = MessageType(rawValue: try reader.byte()) else { throw ParseError(description: "unknown message type") }
        _ = try reader.byte()
        guard try reader.byte() == 1 else { throw ParseError(description: "unknown protocol version") }
        let bodyLength = Int(try reader.uint32())
        self.init(type: type, serial: try reader.uint32())
        let fieldsLength = Int(try reader.uint32())
        let fieldsEnd = reader.offset + fieldsLength
        var signature = ""
        while reader.offset < fieldsEnd {
            try reader.align(8)
            let code = try reader.byte()
            let fieldSignature = try reader.signature()
            let value = try reader.value(fieldSignature)
            switch (code, value) {
            case (1, .objectPath(let text)): path = text
            case (2, .string(let text)): interface = text
            case (3, .string(let text)): member = text
            case (4, .string(let text)): errorName = text
            case (5, .uint32(let number)): replySerial = number
            case (6, .string(let text)): destination = text
            case (7, .string(let text)): sender = text
            case (8, .signature(let text)): signature = text
            default: break
            }
        }
        try reader.align(8)
        guard reader.bytes.count - reader.offset >= bodyLength else { throw ParseError(description: "body cut short") }
        var types = Substring(signature)
        while !types.isEmpty {
            let single = try DBusReader.singleType(&types)
            body.append(try reader.value(single))
        }
    }
}

struct DBusWriter {
    var bytes: [UInt8] = []

    mutating func pad(to alignment: Int) {
        while bytes.count % alignment != 0 { bytes.append(0) }
    }

    mutating func uint32Raw(_ value: UInt32) {
        pad(to: 4)
        for shift in stride(from: 0, to: 32, by: 8) { bytes.append(UInt8(truncatingIfNeeded: value >> UInt32(shift))) }
    }

    mutating func write(_ value: DBusMessage.Value) {
        switch value {
        case .byte(let byte): bytes.append(byte)
        case .boolean(let flag): uint32Raw(flag ? 1 : 0)
        case .int32(let number): uint32Raw(UInt32(bitPattern: number))
        case .uint32(let number): uint32Raw(number)
        case .string(let text), .objectPath(let text):
            let utf8 = Array(text.utf8)
            uint32Raw(UInt32(utf8.count))
            bytes.append(contentsOf: utf8)
            bytes.append(0)
        case .signature(let text):
            bytes.append(UInt8(text.utf8.count))
            bytes.append(contentsOf: text.utf8)
            bytes.append(0)
        case .variant(let inner):
            write(.signature(inner.signature))
            write(inner)
        case .array(let element, let values):
            uint32Raw(0)
            let lengthAt = bytes.count - 4
            // The length excludes the padding before the first element.
            pad(to: DBusWriter.alignment(of: element))
            let start = bytes.count
            for value in values { write(value) }
            let length = UInt32(bytes.count - start)
            for index in 0..<4 { bytes[lengthAt + index] = UInt8(truncatingIfNeeded: length >> UInt32(8 * index)) }
        case .dictEntry(let key, let value):
            pad(to: 8)
            write(key)
            write(value)
        case .structure(let fields):
            pad(to: 8)
            for field in fields { write(field) }
        }
    }

    static func alignment(of signature: String) -> Int {
        switch signature.first {
        case "y", "g", "v": 1
        case "n", "q": 2
        case "x", "t", "d", "(", "{": 8
        default: 4
        }
    }
}

struct DBusReader {
    let bytes: [UInt8]
    var offset = 0

    mutating func align(_ alignment: Int) throws(DBusMessage.ParseError) {
        let next = (offset + alignment - 1) / alignment * alignment
        guard next <= bytes.count else { throw .init(description: "message cut short") }
        offset = next
    }

    mutating func byte() throws(DBusMessage.ParseError) -> UInt8 {
        guard offset < bytes.count else { throw .init(description: "message cut short") }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func uint32() throws(DBusMessage.ParseError) -> UInt32 {
        try align(4)
        guard offset + 4 <= bytes.count else { throw .init(description: "message cut short") }
        defer { offset += 4 }
        return UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2]) << 16 | UInt32(bytes[offset + 3]) << 24
    }

    mutating func text(length: Int) throws(DBusMessage.ParseError) -> String {
        guard length >= 0, offset + length + 1 <= bytes.count else { throw .init(description: "string cut short") }
        defer { offset += length + 1 }
        return String(decoding: bytes[offset..<offset + length], as: UTF8.self)
    }

    mutating func signature() throws(DBusMessage.ParseError) -> String {
        try text(length: Int(try byte()))
    }

    static func singleType(_ types: inout Substring) throws(DBusMessage.ParseError) -> String {
        guard let first = types.first else { throw .init(description: "empty signature") }
        switch first {
        case "a":
            types.removeFirst()
            return "a" + (try singleType(&types))
        case "(", "{":
            let close: Character = first == "(" ? ")" : "}"
            var depth = 0
            var result = ""
            while let character = types.first {
                types.removeFirst()
                result.append(character)
                if character == first { depth += 1 }
                if character == close {
                    depth -= 1
                    if depth == 0 { return result }
                }
            }
            throw .init(description: "unbalanced signature")
        default:
            types.removeFirst()
            return String(first)
        }
    }

    mutating func value(_ signature: String) throws(DBusMessage.ParseError) -> DBusMessage.Value {
        switch signature.first {
        case "y": return .byte(try byte())
        case "b": return .boolean(try uint32() != 0)
        case "i": return .int32(Int32(bitPattern: try uint32()))
        case "u": return .uint32(try uint32())
        case "s": return .string(try text(length: Int(try uint32())))
        case "o": return .objectPath(try text(length: Int(try uint32())))
        case "g": return .signature(try self.signature())
        case "v":
            let inner = try self.signature()
            return .variant(try value(inner))
        case "a":
            let element = String(signature.dropFirst())
            let length = Int(try uint32())
            try align(DBusWriter.alignment(of: element))
            let end = offset + length
            guard end <= bytes.count else { throw .init(description: "array cut short") }
            var values: [DBusMessage.Value] = []
            while offset < end { values.append(try value(element)) }
            return .array(elementSignature: element, values)
        case "(", "{":
            try align(8)
            var inner = Substring(signature.dropFirst().dropLast())
            var fields: [DBusMessage.Value] = []
            while !inner.isEmpty { fields.append(try value(try DBusReader.singleType(&inner))) }
            if signature.first == "{", fields.count == 2 { return .dictEntry(fields[0], fields[1]) }
            return .structure(fields)
        default:
            throw .init(description: "type '\(signature)' is not read")
        }
    }
}
