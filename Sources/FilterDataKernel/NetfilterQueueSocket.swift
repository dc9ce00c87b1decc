// The netlink side of NFQUEUE, through libmnl and libnetfilter_queue's mnl API.
// This and Sandbox.swift are the only files of the data path that import C
// modules; everything above them sees typed Swift values (FilterData's
// PacketQueue, KernelVerdict, QueuedPacket).
public import FilterData
import CNetfilterQueue
import CHallpassSys
import HallpassSandbox
#if canImport(Glibc)
import Glibc
#endif

/// A netlink socket bound to one NFQUEUE queue.
///
/// `@safe`: the libmnl socket and the receive buffer are private, live as
/// long as the object, and no pointer into them leaves a method (a packet
/// leaves as a span that lives only for the `receive` callback).
@safe public final class NetfilterQueueSocket: PacketQueue {
    public let queue: UInt16
    public private(set) var counters = QueueSocketCounters()

    private let socket: OpaquePointer
    /// The netlink socket, for a caller that polls it with other descriptors.
    public let descriptor: Int32
    private let portID: UInt32
    /// One datagram at a time; big enough for a 64 KiB GSO packet and its attributes.
    private let receiveBuffer: UnsafeMutableRawBufferPointer
    private var verdictBatch: [UInt8] = []
    /// Where nfq_nlmsg_parse puts a message's attributes: one table for the
    /// socket's life, not an array made for every datagram read. libnetfilter_queue's
    /// NFQA_MAX is smaller than the kernel's: room is left.
    private var attributes = unsafe [UnsafeMutablePointer<nlattr>?](repeating: nil, count: 64)
    private static let copyRange: UInt32 = 0xFFFF

    /// Opens the socket, binds the queue, asks for whole packets, the socket's
    /// uid/gid and GSO packets unsegmented, and turns on NETLINK_NO_ENOBUFS.
    /// With `failOpen`, packets the queue has no room for pass uninspected
    /// (NFQA_CFG_F_FAIL_OPEN); without it they are dropped.
    public init(queue: UInt16, failOpen: Bool, maximumQueued: UInt32 = 4096) throws(QueueSocketError) {
        self.queue = queue
        // unsafe (this initializer): libmnl's socket handle, owned by this object until deinit;
        // the option values are locals passed by address for the duration of each call.
        guard let socket = unsafe mnl_socket_open2(NETLINK_NETFILTER, Int32(SOCK_CLOEXEC.rawValue)) else { throw QueueSocketError(operation: "open", errno: errno) }
        guard unsafe mnl_socket_bind(socket, 0, pid_t(MNL_SOCKET_AUTOPID)) >= 0 else {
            let code = errno
            unsafe mnl_socket_close(socket)
            throw QueueSocketError(operation: "bind", errno: code)
        }
        unsafe self.socket = socket
        self.descriptor = unsafe mnl_socket_get_fd(socket)
        self.portID = unsafe mnl_socket_get_portid(socket)
        unsafe self.receiveBuffer = .allocate(byteCount: Int(NetfilterQueueSocket.copyRange) + 8192, alignment: 8)

        var one: Int32 = 1
        _ = unsafe mnl_socket_setsockopt(socket, NETLINK_NO_ENOBUFS, &one, socklen_t(MemoryLayout<Int32>.size))
        // A larger receive buffer absorbs bursts; SO_RCVBUFFORCE needs CAP_NET_ADMIN, which we have.
        var bufferSize: Int32 = 8 << 20
        _ = unsafe setsockopt(descriptor, SOL_SOCKET, SO_RCVBUFFORCE, &bufferSize, socklen_t(MemoryLayout<Int32>.size))

        var flags = UInt32(NFQA_CFG_F_GSO | NFQA_CFG_F_UID_GID)
        if failOpen { flags |= UInt32(NFQA_CFG_F_FAIL_OPEN) }
        let mask = UInt32(NFQA_CFG_F_GSO | NFQA_CFG_F_UID_GID | NFQA_CFG_F_FAIL_OPEN)
        // Every stored property is set: a throw from here on runs deinit, which
        // closes the socket and frees the buffer. Releasing them here as well
        // freed them twice (glibc's `free(): double free` when the queue was
        // already bound by another process).
        // unsafe: each attribute writer gets the header `configure` made in its 512-byte message.
        do throws(QueueSocketError) {
            unsafe try configure { header in unsafe nfq_nlmsg_cfg_put_cmd(header, UInt16(AF_INET), UInt8(NFQNL_CFG_CMD_BIND.rawValue)) }
        } catch where error.errno == EPERM && Self.hasNetworkAdministration() {
            // The kernel answers EPERM both to a process without CAP_NET_ADMIN
            // and to a bind of a queue another socket holds; with the
            // capability, it is the second.
            throw QueueSocketError(operation: "bind queue \(queue)", errno: EPERM)
        }
        unsafe try configure { header in
            unsafe nfq_nlmsg_cfg_put_params(header, UInt8(NFQNL_COPY_PACKET.rawValue), Int32(NetfilterQueueSocket.copyRange))
            unsafe nfq_nlmsg_cfg_put_qmaxlen(header, maximumQueued)
            // Flags go with their mask, or the kernel ignores them.
            unsafe mnl_attr_put_u32(header, UInt16(NFQA_CFG_FLAGS.rawValue), flags.bigEndian)
            unsafe mnl_attr_put_u32(header, UInt16(NFQA_CFG_MASK.rawValue), mask.bigEndian)
        }
    }

    /// Whether this process holds CAP_NET_ADMIN in its effective set.
    private static func hasNetworkAdministration() -> Bool {
        var effective: UInt64 = 0, permitted: UInt64 = 0, inheritable: UInt64 = 0
        // unsafe: three locals passed by address for the duration of the call.
        guard unsafe hp_capget(&effective, &permitted, &inheritable) == 0 else { return false }
        return effective & Sandbox.netAdmin != 0
    }

    deinit {
        // unsafe: the handle and the buffer are released once, here, and used by nothing after.
        unsafe mnl_socket_close(socket)
        unsafe receiveBuffer.deallocate()
    }

    /// Sends one config message with an ACK request and waits for the answer,
    /// so a refused bind (another process holds the queue) is an error here.
    private func configure(_ fill: (UnsafeMutablePointer<nlmsghdr>) -> Void) throws(QueueSocketError) {
        var buffer = [UInt8](repeating: 0, count: 512)
        let sent: Int = unsafe buffer.withUnsafeMutableBytes { raw in
            // unsafe: nfq_nlmsg_put and the attribute writers stay within the 512 bytes of this small message.
            let header = unsafe nfq_nlmsg_put(raw.baseAddress!.assumingMemoryBound(to: CChar.self), Int32(NFQNL_MSG_CONFIG.rawValue), UInt32(queue))!
            unsafe header.pointee.nlmsg_flags |= UInt16(NLM_F_ACK)
            unsafe fill(header)
            return unsafe mnl_socket_sendto(socket, header, Int(header.pointee.nlmsg_len))
        }
        guard sent >= 0 else { throw QueueSocketError(operation: "configure", errno: errno) }
        // unsafe: recv writes at most receiveBuffer.count bytes into the buffer this object owns;
        // the 4-byte error code is read only when the payload holds 4 bytes.
        let received = unsafe recv(descriptor, receiveBuffer.baseAddress, receiveBuffer.count, 0)
        guard received >= 0 else { throw QueueSocketError(operation: "configure", errno: errno) }
        var errorCode: Int32 = 0
        unsafe forEachMessage(count: received) { header, payload in
            if header.nlmsg_type == UInt16(NLMSG_ERROR), payload.count >= 4 {
                errorCode = unsafe payload.loadUnaligned(as: Int32.self)
            }
        }
        if errorCode < 0 { throw QueueSocketError(operation: "configure", errno: -errorCode) }
    }

    /// Waits up to `timeoutMilliseconds` for packets, then drains up to
    /// `limit` queued messages without waiting again, calling `body` for each
    /// packet. Returns how many packets it handled.
    public func receive(limit: Int, timeoutMilliseconds: Int32, _ body: (QueuedPacket, Span<UInt8>) -> Void) throws(QueueSocketError) -> Int {
        var pollDescriptor = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        // unsafe: poll reads and writes the one local pollfd.
        let ready = unsafe poll(&pollDescriptor, 1, timeoutMilliseconds)
        if ready < 0 {
            if errno == EINTR { return 0 }
            throw QueueSocketError(operation: "poll", errno: errno)
        }
        if ready == 0 { return 0 }
        return try receiveReady(limit: limit, body)
    }

    /// `receive` for a caller that already knows the socket is readable:
    /// reads up to `limit` packets without waiting.
    public func receiveReady(limit: Int, _ body: (QueuedPacket, Span<UInt8>) -> Void) throws(QueueSocketError) -> Int {
        var handled = 0
        while handled < limit {
            // unsafe: recv writes at most receiveBuffer.count bytes into the buffer this object owns.
            let received = unsafe recv(descriptor, receiveBuffer.baseAddress, receiveBuffer.count, Int32(MSG_DONTWAIT))
            if received < 0 {
                switch errno {
                case EAGAIN, EWOULDBLOCK, EINTR: return handled
                case ENOBUFS:
                    counters.receiveOverruns += 1
                    continue
                default: throw QueueSocketError(operation: "recv", errno: errno)
                }
            }
            // unsafe: the walk stays within the `received` bytes (see forEachMessage).
            unsafe forEachMessage(count: received) { header, _ in
                if header.nlmsg_type == UInt16(NLMSG_ERROR) {
                    return
                }
                guard header.nlmsg_type == UInt16(NFNL_SUBSYS_QUEUE << 8) | UInt16(NFQNL_MSG_PACKET.rawValue) else {
                    counters.malformedMessages += 1
                    return
                }
            }
            handled += parsePackets(count: received, body)
        }
        return handled
    }

    /// Walks the netlink messages in the first `count` bytes of the receive
    /// buffer; counts error replies. `body` gets each header and its payload.
    private func forEachMessage(count: Int, _ body: (nlmsghdr, UnsafeRawBufferPointer) -> Void) {
        var offset = 0
        let headerSize = MemoryLayout<nlmsghdr>.size
        while offset + headerSize <= count {
            // unsafe: offset + headerSize <= count <= the buffer's size; the payload slice ends at
            // offset + length <= count (checked below), and `body` gets it for the call only.
            let header = unsafe receiveBuffer.loadUnaligned(fromByteOffset: offset, as: nlmsghdr.self)
            let length = Int(header.nlmsg_len)
            guard length >= headerSize, offset + length <= count else {
                counters.malformedMessages += 1
                return
            }
            let payload = unsafe UnsafeRawBufferPointer(rebasing: receiveBuffer[(offset + headerSize)..<(offset + length)])
            if header.nlmsg_type == UInt16(NLMSG_ERROR), payload.count >= 4 {
                let code = unsafe payload.loadUnaligned(as: Int32.self)
                if code < 0 {
                    counters.netlinkErrors += 1
                    counters.lastNetlinkError = -code
                }
            }
            unsafe body(header, payload)
            offset += (length + 3) & ~3
        }
    }

    private func parsePackets(count: Int, _ body: (QueuedPacket, Span<UInt8>) -> Void) -> Int {
        var handled = 0
        var offset = 0
        let headerSize = MemoryLayout<nlmsghdr>.size
        let packetType = UInt16(NFNL_SUBSYS_QUEUE << 8) | UInt16(NFQNL_MSG_PACKET.rawValue)
        while offset + headerSize <= count {
            let raw = unsafe receiveBuffer.baseAddress! + offset
            let header = unsafe raw.assumingMemoryBound(to: nlmsghdr.self)
            let length = unsafe Int(header.pointee.nlmsg_len)
            guard length >= headerSize, offset + length <= count else { return handled }
            defer { offset += (length + 3) & ~3 }
            guard unsafe header.pointee.nlmsg_type == packetType else { continue }
            for index in unsafe attributes.indices { unsafe attributes[index] = nil }
            // unsafe: nfq_nlmsg_parse walks attributes within nlmsg_len, which was checked against the bytes received;
            // the attribute pointers it stores point into the receive buffer and are read only in this iteration.
            guard unsafe attributes.withUnsafeMutableBufferPointer({ unsafe nfq_nlmsg_parse(header, $0.baseAddress) }) >= 0,
                let packetHeader = unsafe attributes[Int(NFQA_PACKET_HDR.rawValue)],
                unsafe mnl_attr_get_payload_len(packetHeader) >= UInt16(MemoryLayout<nfqnl_msg_packet_hdr>.size),
                let payloadAttribute = unsafe attributes[Int(NFQA_PAYLOAD.rawValue)]
            else {
                counters.malformedMessages += 1
                continue
            }
            let hdr = unsafe mnl_attr_get_payload(packetHeader)!.loadUnaligned(as: nfqnl_msg_packet_hdr.self)
            let payloadLength = unsafe Int(mnl_attr_get_payload_len(payloadAttribute))
            // unsafe: nfq_nlmsg_parse found the attribute inside the `count` bytes received, and the
            // span is used only during `body`, before the next recv overwrites the buffer.
            let payload = unsafe Span<UInt8>(
                _unsafeStart: mnl_attr_get_payload(payloadAttribute).assumingMemoryBound(to: UInt8.self), count: payloadLength)
            var truncated = false
            if let capture = unsafe attributes[Int(NFQA_CAP_LEN.rawValue)], unsafe mnl_attr_get_payload_len(capture) >= 4 {
                truncated = unsafe Int(UInt32(bigEndian: mnl_attr_get_u32(capture))) > payloadLength
            }
            if truncated { counters.truncatedPackets += 1 }
            func u32(_ attribute: Int32) -> UInt32? {
                guard let value = unsafe attributes[Int(attribute)], unsafe mnl_attr_get_payload_len(value) >= 4 else { return nil }
                return unsafe UInt32(bigEndian: mnl_attr_get_u32(value))
            }
            counters.packetsReceived += 1
            body(
                QueuedPacket(
                    id: UInt32(bigEndian: hdr.packet_id), uid: u32(Int32(NFQA_UID.rawValue)), gid: u32(Int32(NFQA_GID.rawValue)),
                    mark: u32(Int32(NFQA_MARK.rawValue)) ?? 0, hook: hdr.hook, truncated: truncated),
                payload)
            handled += 1
        }
        return handled
    }

    /// Queues a verdict; `flushVerdicts` sends all queued ones in one `sendto`.
    /// The message is written straight into the batch (no allocation per packet).
    public func setVerdict(_ verdict: KernelVerdict, for packetID: UInt32) {
        var replacement = 0
        if case .acceptRewritten(let bytes) = verdict { replacement = bytes.count }
        // A verdict message with a mark is under 64 bytes; a replacement
        // payload (with its 4-byte attribute header, padded to 4) comes on top.
        let room = 128 + replacement
        let start = verdictBatch.count
        verdictBatch.append(contentsOf: repeatElement(0, count: room))
        let length: Int = unsafe verdictBatch.withUnsafeMutableBytes { raw in
            // unsafe: the message is written into the `room` zeroed bytes just appended at `start`.
            let header = unsafe nfq_nlmsg_put(raw.baseAddress!.advanced(by: start).assumingMemoryBound(to: CChar.self), Int32(NFQNL_MSG_VERDICT.rawValue), UInt32(queue))!
            switch verdict {
            case .accept: unsafe nfq_nlmsg_verdict_put(header, Int32(bitPattern: packetID), NF_ACCEPT)
            case .drop: unsafe nfq_nlmsg_verdict_put(header, Int32(bitPattern: packetID), NF_DROP)
            case .repeatWithMark(let mark):
                unsafe nfq_nlmsg_verdict_put(header, Int32(bitPattern: packetID), NF_REPEAT)
                unsafe nfq_nlmsg_verdict_put_mark(header, mark)
            case .acceptRewritten(let bytes):
                unsafe nfq_nlmsg_verdict_put(header, Int32(bitPattern: packetID), NF_ACCEPT)
                // unsafe: the replacement (counted in `room`) is copied from the array inside the closure.
                unsafe bytes.withUnsafeBytes { unsafe nfq_nlmsg_verdict_put_pkt(header, $0.baseAddress, UInt32($0.count)) }
            }
            return unsafe Int(header.pointee.nlmsg_len)
        }
        verdictBatch.removeLast(room - ((length + 3) & ~3))
        counters.verdictsSent += 1
        if verdictBatch.count >= 60_000 { try? flushVerdicts() }
    }

    /// Sends every queued verdict. Errors for individual verdicts come back
    /// later as netlink error messages and are counted by `receive`.
    public func flushVerdicts() throws(QueueSocketError) {
        guard !verdictBatch.isEmpty else { return }
        defer { verdictBatch.removeAll(keepingCapacity: true) }
        // unsafe: sendto reads the batch's own bytes inside the closure.
        let sent = unsafe verdictBatch.withUnsafeBytes { unsafe mnl_socket_sendto(socket, $0.baseAddress, $0.count) }
        if sent < 0 { throw QueueSocketError(operation: "send verdicts", errno: errno) }
    }

    /// Sends an ipset request (InspectionSets) on this socket at once: the
    /// queue's netlink socket reaches every netfilter subsystem, and the
    /// kernel applies the request within the send, so the address is in its
    /// set before any verdict sent after it. A refusal (a full set) comes
    /// back as a netlink error message, counted by `receive`; a failed send
    /// is counted there too.
    public func sendSetRequest(_ request: [UInt8]) {
        // unsafe: sendto reads the request's own bytes inside the closure.
        let sent = unsafe request.withUnsafeBytes { unsafe mnl_socket_sendto(socket, $0.baseAddress, $0.count) }
        if sent < 0 { counters.netlinkErrors += 1 }
    }
}
