/// The page's own words in English and Korean, in the strings file format
/// (see `StringsFile`). English defines the keys: a custom strings file may
/// only set keys that are here, and any key a language leaves out is taken
/// from English.
enum BuiltInStrings {
    static let byLanguage: [(language: String, text: String)] = [("en", english), ("ko", korean)]

    static let english = """
        # Text direction of the language: ltr or rtl.
        direction = ltr

        # The block page.
        title = Page blocked
        heading = This page is blocked
        explanation = The content filter on this computer stopped this page from opening.
        hostLabel = Site
        urlLabel = Address
        categoryLabel = Category
        ruleLabel = Rule
        reasonLabel = Reason
        help = If you need this page for schoolwork, ask your teacher.
        # On a page of a site the school inspects (docs/inspection.md): what is read there, and why.
        inspectedNotice = This site is one of the few the school inspects: to apply its rules for pages, videos and searches, the filter reads the address of each page you open here, not only the site's name, and records what it blocks. Other sites are not read this way.

        # The built-in request-access form (its heading is blockPage.requestAccess.text).
        formReasonLabel = Why do you need this page?
        formSubmit = Send request

        # Where the student's request stands, on the block page.
        pendingHeading = Your request is waiting
        pendingText = Your request is waiting for a teacher. This page checks again every few seconds.
        approvedHeading = Your request was approved
        approvedText = The page opens in a moment.
        approvedOpen = Open the page
        deniedHeading = Your request was not approved
        deniedText = You can ask again with another reason.
        messageLabel = Message

        # After the form was sent.
        receivedTitle = Request sent
        receivedHeading = Your request has been sent
        receivedText = Someone at your school will look at it. The page stays blocked until it is allowed.
        requestIdLabel = Request number

        # Error pages.
        errorTitle = Error
        errorCodeLabel = Error code
        errorBadRequest = The request could not be understood.
        errorNotFound = There is no page here.
        errorMethodNotAllowed = This kind of request is not allowed here.
        errorTooLarge = The request was too large.
        errorOther = Something went wrong. Please try again later.
        errorReasonMissing = Please say why you need this page.
        errorReasonTooLong = The reason is too long: write at most 500 characters.
        errorFormExpired = This form has expired or did not come from this page. Go back, reload the page and send it again.
        errorTooManyPending = You have too many requests waiting already. Wait for an answer before you ask again.
        errorTooManyToday = You have sent as many requests as you may today. Try again tomorrow.
        errorLocked = This page cannot be opened on request.
        """

    static let korean = """
        direction = ltr

        title = 차단된 페이지
        heading = 이 페이지는 차단되었습니다
        explanation = 이 컴퓨터의 콘텐츠 필터가 이 페이지를 열지 못하도록 막았습니다.
        hostLabel = 사이트
        urlLabel = 주소
        categoryLabel = 분류
        ruleLabel = 규칙
        reasonLabel = 사유
        help = 수업에 필요한 페이지라면 선생님께 말씀해 주세요.
        inspectedNotice = 이 사이트는 학교가 검사하는 몇 안 되는 사이트 중 하나입니다. 페이지, 동영상, 검색에 대한 학교 규칙을 적용하기 위해 필터가 사이트 이름뿐 아니라 여기에서 여는 각 페이지의 주소를 읽고, 차단한 내용을 기록합니다. 다른 사이트는 이렇게 읽지 않습니다.

        formReasonLabel = 이 페이지가 필요한 이유
        formSubmit = 요청 보내기

        pendingHeading = 요청을 기다리는 중입니다
        pendingText = 선생님의 답변을 기다리고 있습니다. 이 페이지는 몇 초마다 다시 확인합니다.
        approvedHeading = 요청이 승인되었습니다
        approvedText = 잠시 후 페이지가 열립니다.
        approvedOpen = 페이지 열기
        deniedHeading = 요청이 승인되지 않았습니다
        deniedText = 다른 이유를 적어 다시 요청할 수 있습니다.
        messageLabel = 메시지

        receivedTitle = 요청 완료
        receivedHeading = 요청을 보냈습니다
        receivedText = 학교 담당자가 요청을 검토합니다. 허용되기 전까지는 이 페이지가 계속 차단됩니다.
        requestIdLabel = 요청 번호

        errorTitle = 오류
        errorCodeLabel = 오류 코드
        errorBadRequest = 요청을 이해할 수 없습니다.
        errorNotFound = 이 주소에는 페이지가 없습니다.
        errorMethodNotAllowed = 여기에서는 허용되지 않는 요청 방식입니다.
        errorTooLarge = 요청이 너무 큽니다.
        errorOther = 문제가 발생했습니다. 잠시 후 다시 시도해 주세요.
        errorReasonMissing = 이 페이지가 필요한 이유를 적어 주세요.
        errorReasonTooLong = 이유가 너무 깁니다. 500자 이내로 적어 주세요.
        errorFormExpired = 이 양식은 만료되었거나 이 페이지에서 온 것이 아닙니다. 뒤로 가서 페이지를 새로 고친 뒤 다시 보내 주세요.
        errorTooManyPending = 이미 기다리는 요청이 너무 많습니다. 답변을 받은 뒤 다시 요청해 주세요.
        errorTooManyToday = 오늘 보낼 수 있는 요청을 모두 보냈습니다. 내일 다시 시도해 주세요.
        errorLocked = 이 페이지는 요청으로 열 수 없습니다.
        """
}
